"""`python -m engine run JOB.json --jobdir DIR`: the harness's entry point on the box."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .contract.checks import ContractError
from .contract.job import load_job
from .harness.steps import run_job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one evaluation and write results.json")
    run.add_argument("job", type=Path)
    run.add_argument("--jobdir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        job = load_job(args.job)
    except ContractError as exc:
        print(f"invalid job description: {exc}", file=sys.stderr)
        return 2
    args.jobdir.mkdir(parents=True, exist_ok=True)
    doc = run_job(job, args.jobdir)
    return 1 if doc["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
