"""GPU run 53Q (docs/gpu-e2e.md, "Run 53Q"): the shipped sparkinfer profile's Qwen3.6 run at its
real shape for the first time, on an H100: the 40-layer random-weight file of Qwen3.6-35B-A3B's
shape, the run alone, no witnesses, an A/A of 2 pairs. Its pace is what the bench's simulated box
now uses for that run (bench/_paces.py `_measured_qwen36`; it was assumed from the 4-layer file),
and its wall clock ruled the run's two token-fill prefills in at the first look."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _paces  # noqa: E402
from evalbot.engine.contract.results import validate  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402
from evalbot.grading.grade import grade  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.grading.unexplained_cost import NOT_RULED_OUT  # noqa: E402

RUN = ROOT / "tests" / "data" / "sparkinfer" / "q53-h100"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
QWEN36 = "qwen3.6-35b-a3b"


def _results() -> dict[str, Any]:
    return validate(json.loads((RUN / "qwen36-full-aa.results.json").read_text()))


def test_it_ran_the_shipped_run_at_its_real_shape_and_regrades_to_what_it_published() -> None:
    results = _results()
    assert results["profile_version"] == 9 and [m["name"] for m in results["models"]] == [QWEN36]
    assert results["models"][0]["path"].endswith("qwen36-synth.gguf")  # not the 4-layer file
    [shipped] = [r for r in load_profile("sparkinfer").runs if r.model == QWEN36]
    assert {f"{c['metric']}@{c['ctx']}" for c in results["cells"]} == \
        {f"{c.metric}@{c.ctx}" for c in shipped.cells}
    assert not [w for w in results["witnesses"] if w.get("source") != "samples"]
    published = json.loads((RUN / "qwen36-full-aa.verdict.json").read_text())
    verdict = grade(results, POLICY)
    assert verdict["headline"] == published["headline"] == "eval:inconclusive"
    assert [(c["key"], c["decision"], c["confirmation"]) for c in verdict["cells"]] == \
        [(c["key"], c["decision"], c["confirmation"]) for c in published["cells"]]


def test_its_wall_clock_ruled_the_token_fills_in_and_not_the_small_cells() -> None:
    """Two pairs rule out 1.5% of prefill@16384's 35 s and @32768's 72 s of work; the cells a
    witness times in the shipped profile (a few ms to 8 s of work here) are no clock's without
    one, so they are not believed: this A/A's inconclusive is the missing witnesses'."""
    by = {c["key"].split("/")[1]: (c["decision"], c["confirmation"])
          for c in grade(_results(), POLICY)["cells"]}
    assert {k for k, v in by.items() if v[0] == "neutral"} == {"prefill@16384", "prefill@32768"}
    assert {k for k, v in by.items() if v == ("unconfirmed", NOT_RULED_OUT)} == \
        {"decode@128", "decode@512", "decode@4096", "prefill@512", "prefill@4096"}


def test_the_bench_runs_qwen36_at_this_measured_pace_near_the_old_estimate() -> None:
    """The estimate from the 4-layer file (120 s a process, prefill 470, decode 440 tok/s)
    was within 5% of the measurement; the measured printed noise is 3-4 times below the
    Qwythos noise the estimate borrowed."""
    pace = _paces.run_pace("sparkinfer", QWEN36, [128])
    assert not pace.assumed and pace.source.endswith("qwen36-full-aa.results.json")
    assert abs(pace.seconds / 120.0 - 1) < 0.05
    for key, rate in pace.rates.items():
        assert abs(rate / _paces.QWEN36_RATES[key.split("@")[0]] - 1) < 0.06, (key, rate)
    assert max(pace.noise.values()) < 0.001 < 0.0023
