"""`evalbot warm-reference` on the local box of the GPU runs (scripts/gpu_runner/evaluate.py's box).

The CLI's command reads a config file; the GPU chains have a profile, a models directory and a
workdir instead. This is the same warm-up (evalbot/service/warm_reference.py: the harness copied
into a job directory, `python -m engine warm-reference` under the box's lock, into the cache the
evaluations read), its progress lines printed as they come, and its exit status.

    python scripts/gpu_runner/warm.py --profile P.yaml --models-dir D --workdir W [--batch 16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from evalbot.config.resources import LABELS_FILE as LABELS  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.remote.local import LocalBox  # noqa: E402
from evalbot.service.warm_reference import failure, run_warm, warm_job  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--profile", "--models-dir", "--workdir"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    a = ap.parse_args()
    box = BoxConfig(name="local", kind="local", workdir=str(Path(a.workdir).resolve()),
                    repo="", models_dir=a.models_dir, trusted=True, python=sys.executable)
    job = warm_job(load_profile(a.profile), load_labels(LABELS).policy("default"), box)
    code, output = run_warm(LocalBox("local", box.workdir), box, job, a.batch, a.timeout_s,
                            lambda line: print(line.rstrip(), flush=True))
    if code != 0:
        print(failure(box, code, output), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
