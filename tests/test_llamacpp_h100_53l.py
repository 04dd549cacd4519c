"""GPU run 53L (docs/gpu-e2e.md), on one H100: issue 53's llamacpp witnesses measured and tried.

- witness-aa: main against main, 16 pairs of each of the three witnesses (`evalbot calibrate`'s
  job on a cut bench): the floors and `work_s` the shipped profile carries.
- hide-prefill: a head that computes every multi-id batch twice and has llama-bench print its
  prompt rates x2, under the candidate profile (hide-prefill.yaml): its processes took ~2 s
  longer than main's, its printed prefill@4096 only 5.3% slower, and it was REJECTed.
- aa-53: main against a docs-only head under the shipped profile v7 (aa-53.yaml), on a second
  H100 whose witnesses were 2.5-10 times noisier than the first's floors: eval:inconclusive, its
  decode@4096 not believed (a 1.5% slowdown not ruled out at the shipped witness's 32 pairs).

The fixtures are the run's files, less each sample's GPU readings (tests/data/llamacpp/h100-53L)."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import replay
from evalbot.engine.contract.shared.witness_interval import Floor, pair_savings
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import witness_floor, witness_sizing
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.grading.unexplained_cost import NOT_RULED_OUT
from evalbot.report.publication import graded
from evalbot.service.calibrate import witness_noise
from tests.test_calibrate_witness_margin import stored_floors

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "llamacpp" / "h100-53L"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
PREFILL = "qwen3-0p6b-synth/prefill@4096"
DECODE_0, DECODE_4096 = "qwen3-0p6b-synth/decode@0", "qwen3-0p6b-synth/decode@4096"
SHA = "434a94cd9fcbec9f21944e14354ff958d59ac01e"
sys.path.insert(0, str(ROOT / "scripts"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpu_runner import llama_witnesses, summary  # noqa: E402

from bench import _h100_noise, _simbox  # noqa: E402


def _results(name: str) -> dict[str, Any]:
    results = json.loads((RUN / f"{name}.results.json").read_text())
    validate(results)
    return results


def test_the_hiding_head_regrades_to_what_the_run_published() -> None:
    published = json.loads((RUN / "hide-prefill.verdict.json").read_text())
    verdict = grade(_results("hide-prefill"), POLICY)
    assert verdict["headline"] == published["headline"] == "eval:REJECT"
    assert [(c["key"], c["decision"], c.get("confirmation")) for c in verdict["cells"]] == \
        [(c["key"], c["decision"], c.get("confirmation")) for c in published["cells"]]
    assert summary.judge("caught:prefill@4096", verdict)


def test_the_printed_rates_hid_most_of_the_head_s_extra_time() -> None:
    """The head's processes took 1.9-2.1 s longer than main's in every pair (wall time), while its
    printed prefill@4096 claims 5.3% of 0.5 s of prefill (3 repetitions of 4096 ids): ~0.03 s."""
    results = _results("hide-prefill")
    [samples] = [w for w in results["witnesses"] if w["source"] == "samples"]
    walls: dict[int, dict[str, float]] = {}
    for s in samples["samples"]:
        walls.setdefault(s["pair"], {})[s["side"]] = s["seconds"]
    extra = [p["head"] - p["base"] for p in walls.values()]
    assert len(extra) == 8 and min(extra) > 1.8
    [cell] = [c for c in results["cells"] if f"{c['model']}/{c['metric']}@{c['ctx']}" == PREFILL]
    base = np.mean([s["value"] for s in cell["samples"] if s["side"] == "base"])
    head = np.mean([s["value"] for s in cell["samples"] if s["side"] == "head"])
    printed_extra_s = 3 * 4096 * (1 / head - 1 / base)
    assert 0.01 < printed_extra_s < 0.05


def _printing_main_s_prefill_rate(results: dict[str, Any]) -> dict[str, Any]:
    """The same processes, had the head printed main's own prefill rate in every pair: the
    cells' looks are the harness's replay of those rates (it would have stopped at the first)."""
    doc = copy.deepcopy(results)
    for c in doc["cells"]:
        if c["metric"] == "prefill":
            base = {s["pair"]: s["value"] for s in c["samples"] if s["side"] == "base"}
            for s in c["samples"]:
                s["value"] = base[s["pair"]]
    for c, looks in zip(doc["cells"], replay.replay_all(doc["cells"], doc["rule"]), strict=True):
        c["looks"] = [{"decision": lk.decision, "pairs": lk.pairs} for lk in looks]
    return doc


def test_printing_main_s_rate_exactly_is_still_not_believed() -> None:
    """The hostile variant: no printed regression at all. The printed rate now says unchanged;
    the samples' wall times, 2 s a pair against a 0.48 s floor, say the head spent time its rates
    do not account for: prefill@4096 is not believed and the PR gets no better than
    inconclusive (the witnesses, which the REJECT spared, are not needed for it)."""
    doc = _printing_main_s_prefill_rate(_results("hide-prefill"))
    verdict = grade(doc, POLICY)
    cells = {c["key"]: c for c in verdict["cells"]}
    assert cells[PREFILL]["decision"] == "unconfirmed"
    assert cells[PREFILL]["confirmation"] == "time unaccounted for"
    assert summary.judge("caught:prefill@4096", verdict)
    assert verdict["headline"] == "eval:inconclusive"


def test_the_a_a_s_witnesses_agreed_with_main_on_every_process() -> None:
    results = _results("witness-aa")
    ran = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert [w["name"] for w in ran] == ["prefill-4k-decode-896", "decode-0", "prefill-4096-at-4096"]
    for w in ran:
        kept = [s for s in w["samples"] if not s["dropped"]]
        assert len(kept) == 32 and all(s["verified"] and s["agreement"] == 1.0 for s in kept)


@pytest.mark.parametrize("profile", [RUN / "hide-prefill.yaml", "llamacpp"])
def test_the_floors_and_work_are_the_a_a_s(profile: Path | str) -> None:
    """The run's candidate and the shipped profile carry what `evalbot calibrate` reads from
    the A/A: each witness's pair sd (16 pairs, 15 degrees of freedom) and, for the new shapes,
    main's median seconds as `work_s`."""
    results = _results("witness-aa")
    floors = {k.split(":", 1)[1]: v for k, v in witness_noise(results).items()}
    assert {k: round(sd, 4) for k, (sd, _) in floors.items()} == \
        {"prefill-4k-decode-896": 0.0079, "decode-0": 0.0022, "prefill-4096-at-4096": 0.0015}
    work = llama_witnesses.work_of(results)
    p = load_profile(str(profile))
    ws = {w.name: w for r in p.runs for w in r.witnesses}
    assert set(ws) == set(floors) and p.speed.witness_every_cell
    for name, (sd, n) in floors.items():
        assert (ws[name].sd_floor_s, ws[name].floor_df) == (round(sd, 4), n - 1)
        assert ws[name].work_s == round(work.get(name, 0.0), 4)
    assert ws["decode-0"].work_s == 0.5648 and ws["prefill-4096-at-4096"].work_s == 0.185


def test_nothing_published_names_a_host_address_or_port() -> None:
    for path in sorted(RUN.iterdir()):
        text = path.read_text()
        assert not re.search(r"\b\d{1,3}(\.\d{1,3}){3}\b", text), path.name
        assert not re.search(r"(ssh://|https?://|:\d{2,5}\b(?!\.))", text), path.name
        assert "gpu_before" not in text and "GPU-" not in text, path.name
    for name in ("hide-prefill.comment.md", "aa-53.comment.md"):
        assert "--repo [redacted]" in (RUN / name).read_text()
    for name in ("hide-prefill.yaml", "witness-aa.yaml", "aa-53.yaml"):
        assert "host" not in yaml.safe_load((RUN / name).read_text())


# ---- aa-53: the shipped profile v7 on a second, noisier H100 ---------------------------------


def _same(a: Any, b: Any, where: str = "") -> None:
    """Equal, floats to 1e-9 relative: the GPU box's numpy summed one geometric mean's logs in
    another order (the last digit of decode@0's base_gmean)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9), where
    else:
        assert a == b, where


def _witnesses(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in results["witnesses"] if w["source"] == "witness"}


def test_the_second_host_s_a_a_regrades_to_what_the_run_published() -> None:
    """The published verdict, regraded from the results: inconclusive, decode@4096 not believed
    (its witness went to its last look, 32 pairs, without ruling 1.5% out), the other two cells
    unchanged and believed, their witnesses settled at 16 pairs."""
    results = _results("aa-53")
    assert results["profile_version"] == 7 and results["rule"]["witness_margin"] == 0.015
    published = json.loads((RUN / "aa-53.verdict.json").read_text())
    verdict = graded(results, POLICY)
    # but for the samples' cost bound, whose flag level is split over the rule's looks since
    # a run measures on (evalbot/grading/unexplained_cost.py): unflagged before and after
    [regraded] = [w["cost"] for w in verdict["witnesses"] if "cost" in w]
    [was] = [w["cost"] for w in published["witnesses"] if "cost" in w]
    assert regraded["cost_lo_s"] < was["cost_lo_s"] < 0 and not regraded["flagged"]
    regraded["cost_lo_s"] = was["cost_lo_s"]
    _same(verdict, published)
    assert verdict["headline"] == "eval:inconclusive"
    assert [(c["key"], c["decision"], c["believed"]) for c in verdict["cells"]] == [
        (DECODE_0, "neutral", True), (DECODE_4096, "unconfirmed", False),
        (PREFILL, "neutral", True)]
    [not_believed] = [c for c in verdict["cells"] if not c["believed"]]
    assert not_believed["confirmation"] == NOT_RULED_OUT
    ran = _witnesses(results)
    assert len(pair_savings(ran["prefill-4k-decode-896"]["samples"], True)) == 32
    assert ran["prefill-4k-decode-896"]["stopped"] == ""  # its last look, undecided
    assert {ran[n]["stopped"] for n in ("decode-0", "prefill-4096-at-4096")} == {"settled"}
    assert not summary.judge("neutral", verdict)


def test_the_second_host_s_witnesses_were_far_noisier_than_53l_s_floors() -> None:
    """The premise, from the pairs: a pair's sd 10x, 7x and 2.5x the floors the job carried
    (53L's witness A/A), main's own processes ten times as scattered; no offset between the two
    sides (the head is main's code), so the noise, not a slowdown, left the cell unruled."""
    ran = _witnesses(_results("aa-53"))
    ratios = {}
    for name, w in ran.items():
        d = pair_savings(w["samples"], need_verified=True)
        ratios[name] = float(np.std(d, ddof=1)) / w["sd_floor_s"]
        assert abs(float(np.mean(d))) < 2.5 * float(np.std(d, ddof=1)) / np.sqrt(len(d))
    assert ratios["prefill-4k-decode-896"] > 9 and ratios["decode-0"] > 6
    assert 2 < ratios["prefill-4096-at-4096"] < 3
    before = _witnesses(_results("witness-aa"))["prefill-4k-decode-896"]["samples"]
    after = ran["prefill-4k-decode-896"]["samples"]
    main_sd = [np.std([s["seconds"] for s in x if s["side"] == "base"], ddof=1)
               for x in (before, after)]
    assert main_sd[1] > 8 * main_sd[0]


def _calibrated(tmp_path: Path) -> tuple[dict[str, float], int]:
    """The witness floors `evalbot calibrate --witnesses` would store on this box had its A/A
    drawn these pairs (the head's code is main's), read back as a job gets them."""
    return stored_floors(tmp_path, witness_noise(_results("aa-53")))


def _job(tmp_path: Path, floors: dict[str, float], df: int) -> Any:
    box = BoxConfig(name="h100-2", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    return make_job(load_profile("llamacpp"), POLICY, box, SHA, SHA, sd_floors=floors,
                    floor_df=df)


def test_calibrated_the_depth_witnesses_get_their_sized_looks_and_the_shipped_one_does_not(
        tmp_path: Path) -> None:
    """The production path on this box, calibrated: the job sizes the last looks of the two
    witnesses with a `work_s` to witness_sizing's cap (64 pairs) and grows the room to fit them
    (share 0.5 -> 1.0, which the box's own walls fit: the room cuts nothing); the shipped
    witness has no `work_s` (its span holds an uncredited prefill) and keeps 32 pairs. At the
    box's noise an honest A/A's decode@4096 then misses 1.5% about one time in two and
    decode@0 about one in six: most honest PRs stay inconclusive, the false-flag target
    (0.1% a PR) out of reach at any last look up to the cap."""
    results = _results("aa-53")
    floors, df = _calibrated(tmp_path)
    assert df == 15 and floors["witness:prefill-4k-decode-896"] == pytest.approx(0.0802, abs=1e-4)
    shipped = {w.name: w for r in _job(tmp_path, {}, 5).runs for w in r.witnesses}
    job = _job(tmp_path, floors, df)
    specs = {w.name: w for r in job.runs for w in r.witnesses}
    assert {n: w.looks[-1] for n, w in shipped.items()} == dict.fromkeys(specs, 32)
    assert {n: w.looks[-1] for n, w in specs.items()} == {
        "prefill-4k-decode-896": 32, "decode-0": witness_sizing.MAX_LAST_LOOK,
        "prefill-4096-at-4096": witness_sizing.MAX_LAST_LOOK}
    assert specs["prefill-4k-decode-896"].work_s == 0
    assert job.rule.witness_share == 1.0 and _job(tmp_path, {}, 5).rule.witness_share == 0.5
    # the room: every witness to its last look, at this box's walls, within the share of the
    # budget as main's pace scales it (StoppingRule.total_budget_s: budget_s x main's seconds / budget_pace_s)
    pace = np.mean([s["wall_s"] for s in results["cells"][0]["samples"] if s["side"] == "base"])
    walls = {n: np.mean([s["wall_s"] for s in w["samples"]]) for n, w in _witnesses(results).items()}
    need = sum(2 * specs[n].looks[-1] * walls[n] for n in specs)
    assert need < job.rule.witness_share * job.rule.budget_s * pace / job.rule.budget_pace_s
    cells = {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in results["cells"]}
    miss = {}
    for name, w in specs.items():
        [(key, tokens)] = w.cells.items()
        base = np.mean([s["value"] for s in cells[key]["samples"] if s["side"] == "base"])
        delta = job.rule.witness_margin * tokens / base  # 1.5% of main's seconds for the work
        miss[name] = witness_sizing.miss(w.looks[-1], w.looks, Floor(w.sd_floor_s, w.floor_df),
                                         delta, w.rule_version)
    assert 0.3 < miss["prefill-4k-decode-896"] < 0.7
    assert 0.1 < miss["decode-0"] < 0.3
    assert miss["prefill-4096-at-4096"] < 0.001
    believed = np.prod([1 - p for p in miss.values()])
    assert believed < 0.5


def test_the_run_s_pairs_judged_with_the_box_s_own_floors_still_leave_decode_4096_unruled(
        tmp_path: Path) -> None:
    """The same results, each witness carrying the calibrated floor and looks the job would
    have: the 32 pairs pool with the box's own sd (no longer refuted) and still do not rule out
    1.5% of decode@4096; the other two cells stay ruled in at their 16 pairs."""
    results = copy.deepcopy(_results("aa-53"))
    floors, df = _calibrated(tmp_path)
    specs = {w.name: w for r in _job(tmp_path, floors, df).runs for w in r.witnesses}
    for w in _witnesses(results).values():
        s = specs[w["name"]]
        w.update(sd_floor_s=s.sd_floor_s, floor_df=s.floor_df, looks=list(s.looks),
                 rule_version=s.rule_version)
    verdict = grade(results, POLICY)
    assert verdict["headline"] == "eval:inconclusive"
    assert [(c["key"], c["decision"], c.get("confirmation")) for c in verdict["cells"]] == [
        (DECODE_0, "neutral", "unconfirmed"), (DECODE_4096, "unconfirmed", NOT_RULED_OUT),
        (PREFILL, "neutral", "unconfirmed")]
    judged = {j["name"]: j for j in verdict["witnesses"]}
    assert judged["prefill-4k-decode-896"]["sd"] == "pooled"  # the box's floor, not refuted


def test_uncalibrated_the_store_would_call_53l_s_floors_stale_on_this_box() -> None:
    """The other production path: left uncalibrated, the box's own jobs refute the profile's
    floors. main's consecutive processes (evalbot/grading/witness_floor.py), this run's pairs
    read as two jobs of 16 and 8 pairs, are 2.7-9 times the floors: every witness is stale, so
    none runs and its cell is not believed until `evalbot calibrate`."""
    runs = []
    for w in _witnesses(_results("aa-53")).values():
        half = len({s["pair"] for s in w["samples"]}) // 2
        for job, pairs in enumerate((range(half), range(half, 2 * half))):
            runs.append(witness_floor.WitnessRun(
                w["name"], w["sd_floor_s"], w["floor_df"],
                [s for s in w["samples"] if s["pair"] in pairs], float(job)))
    checks = witness_floor.check(runs, {})
    assert len(checks) == 3 and all(c.stale and c.jobs == 2 for c in checks)
    assert all(c.ratio is not None and c.ratio > 2.5 for c in checks)


def test_the_simulated_second_host_is_this_run_s_noise(tmp_path: Path) -> None:
    """bench/_h100_noise.py's "h100-host2": each witness's relative pair sd is this run's (a
    pair's sd over main's mean seconds); calibrated, the job carries it as the floor, else the
    profile's (53L's), as the GPU run did."""
    rel = _h100_noise.relative_sd(_h100_noise.HOST2_RUNS)
    for name, w in _witnesses(_results("aa-53")).items():
        d = pair_savings(w["samples"], need_verified=True)
        main = np.mean([s["seconds"] for s in w["samples"] if s["side"] == "base"])
        assert rel[name] == (pytest.approx(float(np.std(d, ddof=1)) / main), len(d) - 1)
    for box, floors in (("h100-host2", "box"), ("h100-host2-uncalibrated", "profile")):
        evaluator = _simbox.Evaluator(load_profile("llamacpp"), _simbox.World("llamacpp", box=box),
                                      tmp_path)
        for run in evaluator.job.runs:
            for spec in run.witnesses:
                noisy = evaluator.world.witness(run, spec).pair_sd_s
                shipped = {"prefill-4k-decode-896": 0.0079, "decode-0": 0.0022,
                           "prefill-4096-at-4096": 0.0015}[spec.name]
                assert noisy > 2 * shipped
                assert spec.sd_floor_s == (pytest.approx(noisy) if floors == "box" else shipped)
    with pytest.raises(ValueError, match="llamacpp"):
        _h100_noise.runs_of("h100-host2", "sparkinfer")
