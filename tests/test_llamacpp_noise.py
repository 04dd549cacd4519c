"""The shipped llamacpp profile at the noise its own H200 A/A measured
(tests/data/llamacpp/h200-aa.results.json: 21 pairs of the shipped argv, both sides main).

Prefill at depth 0 was bimodal there (~36.5k or ~41k tok/s by process, throw-away first tests
and all): a per-pair sd of 0.111, with which no look of the budget can call the cell neutral, so
every A/A and every verdict of the profile was inconclusive (issue 33). The profile prints that
test but does not score it; these tests hold every scored cell to the measured noise."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from bench import _simbox
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.shared import stats
from evalbot.engine.contract.shared.replay import bounds_of
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
AA = ROOT / "tests" / "data" / "llamacpp" / "h200-aa.results.json"


def measured_pair_sd() -> dict[str, float]:
    """Per cell of the A/A fixture, the sd of the per-pair log-ratio."""
    out = {}
    for cell in json.loads(AA.read_text())["cells"]:
        pairs: dict[int, dict[str, float]] = {}
        for s in cell["samples"]:
            if not s["dropped"]:
                pairs.setdefault(s["pair"], {})[s["side"]] = s["value"]
        r = [math.log(p["head"] / p["base"]) for p in pairs.values() if len(p) == 2]
        out[f"{cell['model']}/{cell['metric']}@{cell['ctx']}"] = float(np.std(r, ddof=1))
    return out


def shipped_job():
    box = BoxConfig(name="t", kind="local", workdir="/t", repo="/t", trusted=True)
    return make_job(load_profile("llamacpp"), _simbox.POLICY, box, "0" * 40, "1" * 40, seed=1)


def test_every_scored_cell_can_be_called_neutral_at_its_measured_noise() -> None:
    """At the last look, an A/A estimate of exactly 0 on the measured sd must fit the
    equivalence band (-t, +s) with room to spare (half of it), whichever sd the rule uses (the
    pooled one, or the cell's own where the sample refutes its floor)."""
    job = shipped_job()
    last = bounds_of(json.loads(json.dumps(job.rule.__dict__)))[-1]
    band = math.log1p(job.rule.significance)
    noise = measured_pair_sd()
    for cell in job.cells:
        sd = noise[cell.key]
        floor = job.rule.sd_floors.get(cell.key, job.rule.sd_floor)
        _, half, _ = stats.half_widths(np.array(sd), last.pairs, last, floor)
        assert float(half) < band / 2, f"{cell.key}: measured sd {sd:.3f} never neutral"


def test_the_depth_0_prefill_that_made_every_verdict_inconclusive_is_not_scored() -> None:
    """The measured noise that rules it out, and the profile without it: printed by llama-bench
    (its argv still lists depth 0), credited by no witness, not a cell."""
    assert measured_pair_sd()["qwen3-0p6b-synth/prefill@0"] > 0.1
    job = shipped_job()
    assert "qwen3-0p6b-synth/prefill@0" not in {c.key for c in job.cells}
    (run,) = job.runs
    assert all("prefill@0" not in key for w in run.witnesses for key in w.cells)
    assert "0,0,4096" in run.argv and run.parse["discard_first"] == 2


def test_an_aa_at_the_measured_pace_and_noise_is_neutral(tmp_path: Path) -> None:
    """Whole simulated A/As (the harness on bench/_simbox.py's box at the fixture's pace and
    per-cell noise, the real grading): with depth-0 prefill scored, 299 of 300 were
    inconclusive; without it none of 300 (bench/verdict_quality.py)."""
    evaluator = _simbox.Evaluator(load_profile("llamacpp"), _simbox.World("llamacpp"), tmp_path)
    rng = np.random.default_rng(7)
    kinds = [evaluator.evaluate(_simbox.Head("A/A", honest=False), rng).kind for _ in range(20)]
    assert kinds.count("neutral") >= 18, kinds
    assert "regressed" not in kinds and "improved" not in kinds
