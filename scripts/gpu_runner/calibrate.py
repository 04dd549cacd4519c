"""`evalbot calibrate --witnesses` on the local box of the GPU runs (scripts/gpu_runner/evaluate.py's
sandboxed box, its workdir shared with the evaluations, so main's build is made once): an A/A of
main whose every witness runs PAIRS pairs; each witness's sd of a pair's saving printed and
written as OUT/floors.json, the run's later profiles' floors (llama_witnesses.py).

    python scripts/gpu_runner/calibrate.py --repo R --sha SHA --profile P.yaml --models-dir D
        --workdir W --out OUT --sandbox-user evalbot-sandbox [--pairs 16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalbot.config.resources import LABELS_FILE as LABELS  # noqa: E402
from evalbot.evaluation import pipeline  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.remote.local import LocalBox  # noqa: E402
from evalbot.service.calibrate import calibration_job  # noqa: E402
from gpu_runner.evaluate import sandboxed_box  # noqa: E402
from gpu_runner.llama_witnesses import AA_PAIRS, floors_of  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--repo", "--sha", "--profile", "--models-dir", "--workdir", "--out", "--sandbox-user"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--pairs", type=int, default=AA_PAIRS)
    a = ap.parse_args()
    box = sandboxed_box(a.workdir, a.repo, a.models_dir, a.sandbox_user)
    job = calibration_job(load_profile(a.profile), load_labels(LABELS).policy("default"), box,
                          a.sha, a.pairs, witnesses=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = pipeline.evaluate(LocalBox("local", box.workdir), box, job, out)
    for failure in results["failures"]:  # an A/A that failed measures no floor: say where
        print(f"A/A failed at {failure['stage']}: {failure['message']}", file=sys.stderr)
    floors = floors_of(results) if not results["failures"] else {}
    (out / "floors.json").write_text(json.dumps(floors, indent=1))
    for name, (sd, n) in floors.items():
        print(f"{name:<24} sd of a pair's saving {sd:.4f} s over {n} pairs")
    return 0 if floors else 1


if __name__ == "__main__":
    sys.exit(main())
