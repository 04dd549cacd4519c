"""bench/witness_quality.py in short form (issue 46): it runs every shipped witness through the real
measurement and judgement, prints one row per witness cell and rule, and its figures are sane.
The bars themselves need the full run (docs/statistics.md section 7): 30 evaluations a row say
nothing about 1%, only that the table still measures what it says."""

from __future__ import annotations

import io
import sys
from contextlib import redirect_stdout

import pytest

from bench import _witness_rows, witness_quality
from bench._witness_rows import EDGES, NOISE, shipped_cells

PROFILES = ("llamacpp", "sparkinfer", "demo")


def _table(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[str, list[list[str]]]:
    monkeypatch.setattr(sys, "argv", ["witness_quality.py", *args])
    buf = io.StringIO()
    with redirect_stdout(buf):
        witness_quality.main()
    out = buf.getvalue()
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in out.splitlines()
            if ln.startswith("| ") and not ln.startswith(("| witness", "| floor df"))]
    return out, [r for r in rows if len(r) > 6]


def _share(text: str) -> float:
    return float(text.split()[0])


def test_every_shipped_witness_gets_a_row_per_rule_with_sane_figures(monkeypatch) -> None:
    out, rows = _table(monkeypatch, "--sims", "30", "--profiles", ",".join(PROFILES),
                       "--rules", "2,1")
    cells = shipped_cells(list(PROFILES))
    assert {c.profile for c in cells} == set(PROFILES)  # llamacpp, sparkinfer's, the demo's
    assert [(r[0], r[1], r[5]) for r in rows] == [(c.witness, c.cell, rule) for c in cells
                                                  for rule in ("2", "1")]
    for row, cell in zip(rows[::2], cells, strict=True):  # rule 2
        nulls = [_share(x) for x in row[6:6 + len(NOISE)]]
        honest = [_share(x) for x in row[6 + len(NOISE):6 + len(NOISE) + len(EDGES)]]
        assert all(0 <= x <= 100 for x in nulls + honest), row
        assert nulls[0] <= 10, row  # at the calibrated noise a no-saving head is rarely confirmed
        assert honest[-1] >= honest[0] - 10, row  # a larger gain is not confirmed less often
        if cell.visible("S"):
            assert honest[1] >= 80, row
        assert cell.looks[0] <= float(row[-1]) <= cell.looks[-1], row  # pairs at the S edge
        assert all("(≤" in x for x in row[6:6 + len(NOISE)]), row  # each with its upper bound
    assert "bars (rule 2):" in out
    # the stale-floor test's table: a row per floor's df and job count, each share in 0-100, a
    # box 3x as noisy called stale at least as often as one as noisy as its floor
    stale = [[float(c) for c in ln.strip().strip("|").split("|")] for ln in
             out.split("stale-floor test")[1].splitlines() if ln.startswith("| ") and
             ln.split("|")[1].strip().isdigit()]
    assert len(stale) == len(witness_quality.STALE_DF) * len(witness_quality.STALE_JOBS)
    assert all(0 <= x <= 100 for r in stale for x in r[2:])
    assert all(r[-1] >= r[2] for r in stale)


def test_a_witness_nothing_measured_still_gets_its_no_saving_rows(monkeypatch) -> None:
    # the demo's witness without its assumed time (as a new witness would be): main's time is
    # unknown, the honest rows are left out, the no-saving rows run
    monkeypatch.setattr(_witness_rows, "ASSUMED_MAIN_S", {})
    _, rows = _table(monkeypatch, "--sims", "10", "--profiles", "demo", "--rules", "2")
    assert rows and all(r[4] == "?" for r in rows)
    assert all(r[6 + len(NOISE):] == ["-"] * (len(EDGES) + 1) for r in rows)
    assert all(0 <= _share(x) <= 100 for r in rows for x in r[6:6 + len(NOISE)])
