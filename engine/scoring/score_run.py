"""One score process (a side's score command or the reference) and its dump, checked.

The process runs through engine.sandbox.proc (sandboxed for a side, trusted for the reference)
with an output directory made for it alone; its dump is read without following links and
refused unless every position keeps the score contract (engine/contract/score_dump.py) and every
id lies inside the scored model's vocabulary (engine/scoring/vocab.py).
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

from ..contract.job import Correctness
from ..contract.score_dump import DumpError, check_windows
from ..sandbox import proc, safe_io
from ..sandbox import session as sandbox
from .tokens import OUTPUT_CAP, ScoreFailure
from .vocab import out_of_vocabulary


def run_score(argv: list[str], side: str, tag: str, spec: Correctness, tokens_file: Path,
              model: str, jobdir: Path, harness: Path, build: Path,
              env: dict[str, str], lengths: list[int], vocab: int | None) -> list[Any]:
    """The checked windows of one score run; `lengths` are the positions asked per window."""
    outdir = sandbox.output_dir(jobdir, trusted=side == "reference")
    out = outdir / f"{tag}.json"
    log = jobdir / "logs" / f"score-{tag}.log"
    filled = [a.format(python=sys.executable, harness=str(harness), build=str(build),
                       model=model, tokens=str(tokens_file), out=str(out), topk=str(spec.topk))
              for a in argv]
    cwd = harness if side == "reference" else build
    try:  # the run's output directory, made for it alone, goes: nothing stays to be found
        done = proc.run(filled, cwd=cwd, timeout_s=spec.timeout_s, log=log, env=env,
                        trusted=side == "reference")
        if not done.ok:
            kind = "timeout" if done.timed_out else "crashed"
            why = done.exceeded or f"exit {done.returncode}"  # a cap it went past, or its exit
            raise ScoreFailure(side, kind, f"score run {kind} ({why})", log)
        return read_score(out, side, log, spec.topk, lengths, vocab)
    finally:
        safe_io.remove_tree(outdir)


def read_score(out: Path, side: str, log: Path, topk: int, lengths: list[int],
               vocab: int | None) -> list[Any]:
    who = {"head": "the PR's", "base": "main's"}.get(side, "the reference's")
    odd = not_a_file(out)
    if odd:  # named before opening: a FIFO or a device is never read from
        raise ScoreFailure(side, "unparsable", f"score output unreadable: {who} score dump "
                           f"{out.name} is {odd}, not a regular file", log)
    try:
        doc = safe_io.read_json(out, OUTPUT_CAP)
        windows = check_windows(doc["windows"], topk, lengths)
        if vocab is not None:
            bad = out_of_vocabulary(windows, vocab)
            if bad:
                raise DumpError(bad)
        return [[{"top": top, "argmax": am} for top, am in zip(w["top"], w["argmax"], strict=True)]
                for w in windows]
    except DumpError as exc:  # NaN, a repeated id, an argmax that is not the top, a short row
        raise ScoreFailure(side, "unparsable", f"{who} score dump is refused ({out.name}): {exc}",
                           log) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ScoreFailure(side, "unparsable", f"score output unreadable: {who} {out.name}: "
                           f"{exc}", log) from exc


def not_a_file(path: Path) -> str:
    """What stands at a dump path when it is not a plain file ("" when it is, or is absent)."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return ""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return ""
