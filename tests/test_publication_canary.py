"""Nothing a hostile head prints reaches a published file (issue 45), in the production shape: a
real sshd on loopback, the sandbox user, `evaluate()` with an SSH box, the generated demo
repository with each hostile head as a commit on top of main, the cut demo profile at one look
(tests/demo_profile.py), one store for all three, and the dashboard built from it.

Each head prints CANARY on stdout and stderr of its build and of every process that imports its
engine (its samples, its score run, the witness), and:
- **believed**: main's code, whose bench prints every rate with DIGITS as its decimals (315 tok/s
  as 315.826491735021): the cell is neutral, believed, and its level is published (the one head
  figure a cell may have, at 3 significant digits);
- **witness**: a bench that prints twice its decode rate, so the witness runs, and every process
  that is not a bench or a score run (the witness) prints CANARY where its answers go and exits
  57: the witness's error strings hold the PR's output;
- **crash**: a bench that prints CANARY and exits 57: the failure's message names the exit
  status and its log tail holds the PR's output.
The raw results under each out folder's private/ carry all of it (the channels work); no
published file carries any of it: comment.md, verdict.json, labels.txt, results.json, and every
page and copy of the dashboard.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.demo import DemoRepo, generate
from evalbot.evaluation.evaluate import Outcome
from evalbot.report.dashboard import build_site
from evalbot.report.publication import PUBLISHED
from evalbot.store.jobs import Store
from tests.demo_box import box_python, ssh_evaluator
from tests.demo_profile import one_look_demo_profile
from tests.sshd import Sshd
from tests.stub_engine import GIT_ENV

__all__ = ["box_python"]  # fixtures

CANARY = "EVB-CANARY-Q7ZX3"
DIGITS = "826491735021"  # the decimals of every rate the believed head prints
EXIT = 57
CELL = "tiny/decode@64"
# Printed first thing by every process that imports the head's engine, and by its build.
SHOUT = (f"import sys as _sys\n"
         f"print('{CANARY} stdout', flush=True)\n"
         f"print('{CANARY} stderr', file=_sys.stderr, flush=True)\n")
BENCH_LINE = '    print("BENCH_JSON " + json.dumps(result), flush=True)\n'
ENCODED = ('    for r in result.values():\n'
           f'        r["decode_tps"] = float(f"{{int(r[\'decode_tps\'])}}.{DIGITS}")\n'
           f'        r["prefill_tps"] = float(f"{{int(r[\'prefill_tps\'])}}.{DIGITS}")\n'
           + BENCH_LINE)
DOUBLED = ('    for r in result.values():\n'
           '        r["decode_tps"] *= 2\n' + BENCH_LINE)
CRASH = (f'    print("{CANARY} BENCH_JSON {{}}", flush=True)\n'
         f'    print("{CANARY} crashing", file=sys.stderr, flush=True)\n'
         f'    sys.exit({EXIT})\n')
# The witness (the harness's driver fed on a pipe, docs/trust.md "What a demo module can still
# tell"; a sample's or a score run's stdin is /dev/null) prints CANARY among its answers and exits
# 57 at the end.
WITNESS_FAILS = ("import atexit as _atexit, os as _os, stat as _stat\n"
                 "if _stat.S_ISFIFO(_os.fstat(0).st_mode):\n"
                 f"    print('EVALBOT_STEP {CANARY}', flush=True)\n"
                 f"    _atexit.register(lambda: _os._exit({EXIT}))\n")


def _first_thing(source: str, code: str) -> str:
    """`code` as the first statement after the module's `from __future__` imports."""
    future = "from __future__ import annotations\n"
    head, found, rest = source.partition(future)
    return head + found + code + rest if found else code + source


def _git(repo: DemoRepo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo.path, env={**os.environ, **GIT_ENV},
                          check=True, capture_output=True, text=True).stdout


def _head(repo: DemoRepo, name: str, engine_top: str, bench: str) -> str:
    """A PR commit on top of main: its build and engine shout CANARY, its bench line replaced."""
    engine = _git(repo, "show", f"{repo.main_sha}:demo_engine.py")
    assert engine.count(BENCH_LINE) == 1, "main's demo_engine.py changed its BENCH_JSON line"
    sources = {"demo_engine.py": _first_thing(engine.replace(BENCH_LINE, bench), engine_top),
               "build.py": _first_thing(_git(repo, "show", f"{repo.main_sha}:build.py"), SHOUT)}
    _git(repo, "checkout", "-q", "-b", f"pr/{name}", repo.main_sha)
    try:
        for path, text in sources.items():
            (repo.path / path).write_text(text)
        _git(repo, "commit", "-q", "--no-gpg-sign", "-am", f"{name}: prints {CANARY} everywhere")
        return _git(repo, "rev-parse", "HEAD").strip()
    finally:
        _git(repo, "checkout", "-q", "main")


@pytest.fixture(scope="module")
def runs(sshd: Sshd, box_python: str,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Outcome]]]:
    """The three heads evaluated into one store, each run's files under its own folder, and the
    dashboard built from the store: (the folder of it all, outcome per head)."""
    root = Path(tempfile.mkdtemp(prefix="evalbot-canary-"))
    root.chmod(0o755)  # the sandbox user reads the model; the harness (root) the rest
    out = tmp_path_factory.mktemp("published")
    try:
        repo = generate(root / "demo")
        heads = {"believed": _head(repo, "believed", SHOUT, ENCODED),
                 "witness": _head(repo, "witness", SHOUT + WITNESS_FAILS, DOUBLED),
                 "crash": _head(repo, "crash", SHOUT, CRASH)}
        # one look of the samples and of the witness: every channel (build, samples, witness,
        # score runs) still carries the heads' output; what is asked is where it goes
        quick = one_look_demo_profile(tmp_path_factory.mktemp("profile"))
        with ssh_evaluator(sshd, box_python, (root, repo), out,
                           profile_path=quick) as (run, _config):
            outcomes = {name: run(sha, pr, name)
                        for pr, (name, sha) in enumerate(heads.items(), start=45)}
        store = Store(out / "evalbot.sqlite3")
        try:
            build_site(store, out / "dashboard")
        finally:
            store.close()
        yield out, outcomes
    finally:
        subprocess.run(["rm", "-rf", "--", str(root)], check=True)


def _raw(outcome: Outcome) -> dict[str, Any]:
    return json.loads((outcome.out / "private" / "results.json").read_text())


def _published(out: Path) -> dict[str, str]:
    """Every published file: each run's four, the dashboard's pages and copies."""
    files = [out / name / f for name in ("believed", "witness", "crash") for f in PUBLISHED]
    files += sorted(p for p in (out / "dashboard").rglob("*") if p.is_file())
    return {str(p.relative_to(out)): p.read_text() for p in files}


def _leaks(text: str, head_values: set[str], main_values: set[str]) -> list[str]:
    """What of the head's output a published text shows: CANARY, the exit status, a printed
    rate whole, or any 7 digits in a row of DIGITS once main's own figures (published whole,
    with digits of their own) are taken out."""
    found = [CANARY] if CANARY.lower() in text.lower() else []
    found += re.findall(rf"(?:exit|status|code)\D{{0,3}}{EXIT}\b", text)
    found += [v for v in head_values if v in text]
    for value in sorted(main_values, key=len, reverse=True):
        text = text.replace(value, " ")
    return found + [DIGITS[i:i + 7] for i in range(len(DIGITS) - 6) if DIGITS[i:i + 7] in text]


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _significant(x: float) -> int:
    digits = f"{abs(x):.15g}".replace(".", "").lstrip("0").rstrip("0")
    return len(digits) if math.isfinite(x) and x else 0


def _main_values(outcome: Outcome, raw: dict[str, Any]) -> set[str]:
    """Main's figures as published (whole: they are not the PR's), each as JSON writes it."""
    values = {s["value"] for c in raw.get("cells") or [] for s in c["samples"]
              if s["side"] == "base"}
    values |= {c[k] for c in outcome.verdict["cells"] for k in ("base_median", "base_gmean")
               if c.get(k) is not None}
    return {repr(float(v)) for v in values}


def test_nothing_the_head_prints_reaches_a_published_file(runs):
    out, outcomes = runs
    raw = {name: _raw(outcome) for name, outcome in outcomes.items()}
    # The channels work: the operator's raw results hold what the heads printed.
    believed_values = [s["value"] for c in raw["believed"]["cells"] for s in c["samples"]
                       if s["side"] == "head"]
    assert believed_values and all(DIGITS[:9] in repr(v) for v in believed_values), \
        raw["believed"]["failures"]
    [crash] = raw["crash"]["failures"]
    assert crash["attribution"] == "pr" and str(EXIT) in crash["message"]
    assert CANARY in crash["log_tail"]
    witness_errors = [s["error"] for w in raw["witness"]["witnesses"]
                      if w.get("source", "witness") == "witness"
                      for s in w["samples"] if s["side"] == "head"]
    assert witness_errors and all(witness_errors), witness_errors  # every head process failed
    head_values = {repr(s["value"]) for r in raw.values() for c in r.get("cells") or []
                   for s in c["samples"] if s["side"] == "head"}
    main_values = set().union(*(_main_values(outcomes[n], raw[n]) for n in raw))
    published = _published(out)
    assert {"believed/comment.md", "crash/results.json", "dashboard/index.html"} <= set(published)
    assert any(p.startswith("dashboard/runs/") for p in published)
    leaks = {path: found for path, text in published.items()
             if (found := _leaks(text, head_values, main_values))}
    assert leaks == {}, leaks


def test_the_believed_cell_publishes_one_head_figure_at_three_digits(runs):
    out, outcomes = runs
    outcome = outcomes["believed"]
    [cell] = [c for c in outcome.verdict["cells"] if c["key"] == CELL]
    assert cell["decision"] in ("neutral", "inconclusive") and cell["believed"], cell
    assert cell["head_gmean"] is not None and _significant(cell["head_gmean"]) <= 3
    assert cell["head_median"] is None  # one head figure per cell
    for key in ("speedup", "lo", "hi", "sim_lo", "sim_hi", "eq_lo", "eq_hi"):
        assert _significant(cell[key]) <= 3, (key, cell[key])
    assert f"| {_rate(cell['head_gmean'])} tok/s |" in outcome.comment  # the table's PR column
    [record] = [c for c in _raw(outcome)["cells"]
                if f"{c['model']}/{c['metric']}@{c['ctx']}" == CELL]
    main = sorted((s for s in record["samples"] if s["side"] == "base"), key=lambda s: s["pair"])
    shown = json.loads((out / "believed" / "results.json").read_text())
    [copy] = [c for c in shown["cells"] if (c["metric"], c["ctx"]) == ("decode", 64)]
    assert sorted(s["value"] for s in copy["samples"]) == sorted(s["value"] for s in main)
    # the comment's Samples list: main's, in measured order, as the table writes rates
    line = next(ln for ln in outcome.comment.splitlines()
                if ln.startswith("- tiny decode @ 64 ("))
    assert line.endswith(", ".join(f"{'~' if s['dropped'] else ''}{_rate(s['value'])}"
                                   for s in main)), line


def test_the_failures_read_as_fixed_sentences(runs):
    _out, outcomes = runs
    crash = outcomes["crash"].verdict
    assert crash["kind"] == "crashed" and crash["headline"] == "eval:REJECT"
    [failure] = crash["failures"]
    assert failure["message"] == ("the PR's timed run failed or printed nothing the harness "
                                  "could read") and failure["log_tail"] == ""
    assert crash["reasons"] == [f"speed of the PR: {failure['message']}"]
    assert failure["message"] in outcomes["crash"].comment
    witness = outcomes["witness"].verdict
    [cell] = [c for c in witness["cells"] if c["key"] == CELL]
    assert cell["decision"] in ("unconfirmed", "spoofed") and not cell["believed"], cell
    assert cell["head_gmean"] is None and cell["speedup"] is None  # no figure not believed
