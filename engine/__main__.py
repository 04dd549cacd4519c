"""The harness's entry points on the box.

    python -m engine run JOB.json --jobdir DIR
    python -m engine warm-reference JOB.json --jobdir DIR [--batch N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .contract.checks import ContractError
from .contract.job import load_job
from .harness import warm_reference
from .harness.steps import run_job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one evaluation and write results.json")
    run.add_argument("job", type=Path)
    run.add_argument("--jobdir", type=Path, required=True)
    warm = sub.add_parser("warm-reference", help="cache the reference of the job's whole "
                          "correctness grid on this box (resumable)")
    warm.add_argument("job", type=Path)
    warm.add_argument("--jobdir", type=Path, required=True)
    warm.add_argument("--batch", type=_positive, default=16,
                      help="short windows per reference process (default 16; a long window "
                           "counts for as many as its ids make)")
    args = parser.parse_args(argv)
    if args.command == "warm-reference":
        return warm_reference.main(args.job, args.jobdir, args.batch)
    try:
        job = load_job(args.job)
    except ContractError as exc:
        print(f"invalid job description: {exc}", file=sys.stderr)
        return 2
    args.jobdir.mkdir(parents=True, exist_ok=True)
    doc = run_job(job, args.jobdir)
    return 1 if doc["failures"] else 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: at least 1")
    return value


if __name__ == "__main__":
    sys.exit(main())
