"""`evalbot eval --dry-run --json` on the local box with the box's sandbox (a stage of scripts/gpu_run.sh).

The CLI's `eval` builds a local box without a sandbox user; production boxes have one (`evalbot
box init`). This is the same call with the sandbox of a box set up by `evalbot box init`: PR
builds and samples run as SANDBOX_USER through the launcher (none when the harness is root, as
docs/box.md says for a root harness; `sudo -n` and the installed launcher otherwise).

    python scripts/gpu_runner/evaluate.py --repo R --base SHA --head SHA --profile P.yaml
        --models-dir D --workdir W --out OUT --sandbox-user evalbot-sandbox
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evalbot.config.redact import for_boxes  # noqa: E402
from evalbot.config.resources import LABELS_FILE as LABELS  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.evaluation.evaluate import evaluate  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.remote.local import LocalBox  # noqa: E402
from evalbot.service.boxinit import LAUNCHER  # noqa: E402
from evalbot.store.jobs import Store  # noqa: E402


def sandboxed_box(workdir: str, repo: str, models_dir: str, sandbox_user: str) -> BoxConfig:
    """The local box with the sandbox of `evalbot box init` (scripts/gpu_runner/calibrate.py's too)."""
    launcher = () if os.geteuid() == 0 else ("sudo", "-n", str(LAUNCHER))
    return BoxConfig(name="local", kind="local", workdir=str(Path(workdir).resolve()), repo=repo,
                     models_dir=models_dir, trusted=True, python=sys.executable,
                     sandbox_user=sandbox_user, sandbox_launcher=launcher)


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--repo", "--base", "--head", "--profile", "--models-dir", "--workdir", "--out",
                 "--sandbox-user"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--policy", default="default")
    a = ap.parse_args()
    box = sandboxed_box(a.workdir, a.repo, a.models_dir, a.sandbox_user)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    outcome = evaluate(LocalBox("local", box.workdir), box, load_profile(a.profile),
                       load_labels(LABELS).policy(a.policy), repo=a.repo, pr=None,
                       base_sha=a.base, head_sha=a.head, out=out,
                       store=Store(out / "evalbot.sqlite3"), redact=for_boxes([box]),
                       seed=None, progress=None, signer=None)
    print(json.dumps(outcome.verdict, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
