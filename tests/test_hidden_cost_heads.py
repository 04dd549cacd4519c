"""bench/hidden_cost.py's heads: `--every-cell` hides a slowdown on every run's cells (the 131072
run and Qwen3.6's were never tried before it, issue 53), while the default rows stay the first
run's, so docs/statistics.md 9-9c reproduce."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _witness_ungraded, hidden_cost  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402


def _hidden_cells(every_cell: bool, label: str = "") -> set[str]:
    heads = hidden_cost.heads(load_profile("sparkinfer"), every_cell)
    return {k for h in heads if h.name.startswith(f"hide {label}") for k in h.real}


def test_every_cell_hides_a_slowdown_on_a_cell_of_each_run() -> None:
    profile = load_profile("sparkinfer")
    hidden = _hidden_cells(True)
    for run in profile.runs:
        keys = {f"{run.model}/{c.metric}@{c.ctx}" for c in run.cells}
        assert keys <= hidden, (run.model, sorted(keys - hidden))
    # by default the first run's cells only: its smallest and largest alone, all of them mixed,
    # under their earlier names
    first = profile.runs[0]
    assert _hidden_cells(False) == {f"{first.model}/{c.metric}@{c.ctx}" for c in first.cells}
    alone = {h.name.split(" on ")[1] for h in hidden_cost.heads(profile) if " on " in h.name}
    assert alone == {"decode@128", "prefill@65536"}


def test_a_tier_step_is_hidden_only_on_a_cell_a_witness_times() -> None:
    """No other cell earns a tier: the issue's tier-step line is the tiered cells'."""
    timed = {k for r in load_profile("sparkinfer").runs for w in r.witnesses for k in w.cells}
    step = _hidden_cells(True, "tier step")
    assert step and step <= timed
    assert "qwen3.6-35b-a3b/prefill@16384" in _hidden_cells(True, "threshold") - step


def test_an_offset_hides_only_where_the_wall_clock_alone_holds_the_cell() -> None:
    """The samples' check sums a run's cells: every other cell printed slower than it runs
    over-accounts the hidden slowdown's time; only a cell no witness times relies on that sum."""
    timed = {k for r in load_profile("sparkinfer").runs for w in r.witnesses for k in w.cells}
    offsets = [h for h in hidden_cost.heads(load_profile("sparkinfer"), True) if "offset" in h.name]
    assert {k for h in offsets for k in h.real} == {"qwen3.6-35b-a3b/prefill@16384",
                                                    "qwen3.6-35b-a3b/prefill@32768"}
    for h in offsets:
        (slowed,) = h.real
        assert slowed not in timed and h.printed[slowed] == 1 / h.real[slowed]
        assert all(f < 1 for k, f in h.printed.items() if k != slowed), h.printed


def test_the_witnessed_design_grades_the_three_cells_each_on_a_witness_of_its_own() -> None:
    profile = hidden_cost.load(_witness_ungraded.NAME)
    timed = {k: w.name for r in profile.runs for w in r.witnesses for k in w.cells}
    assert {k: timed.get(k) for k in _witness_ungraded.MADE_FROM} == {
        "qwythos-9b/decode@131072": "decode-131072",
        "qwen3.6-35b-a3b/decode@16384": "qwen36-decode-16384",
        "qwen3.6-35b-a3b/decode@32768": "qwen36-decode-32768"}
    world = hidden_cost.world(_witness_ungraded.NAME)
    deep = next(r for r in profile.runs if any(c.ctx == 131072 for c in r.cells))
    spec = next(w for w in deep.witnesses if w.name == "decode-131072")
    pace = world.witness(deep, spec)  # a ProfileRun stands for the job run: only its model is read
    # its load is the model's and a 131072-position fill at the 131072 sweep's 4,586 tok/s
    assert 28.5 < pace.load_s < 31.5 and pace.wall_s > pace.load_s + 3
