"""calibrate's witness warning (evalbot/service/calibrate_report.py `unruled`): a witness whose
floor on the box leaves a cell it rules in not believed, in an honest unchanged PR, with a chance
above the per-PR target the sizing aims for (witness_sizing.FALSE_FLAGS_PER_PR).

The noisy box is GPU run 53L's second H100 (tests/data/llamacpp/h100-53L/aa-53.*: per-witness
pair sd 0.0802, 0.0163 and 0.0038 s, 2.5-10 times the profile's floors), its floors stored as
`evalbot calibrate --witnesses` would; the quiet one is the profile's own floors (53L's host)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.shared.witness_interval import Floor
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import witness_sizing
from evalbot.grading.policy import load_labels
from evalbot.service import calibrate_report
from evalbot.service.calibrate import calibrate_cmd, witness_noise
from evalbot.service.calibrate_report import unruled
from evalbot.store.noise import NoiseStore

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "llamacpp" / "h100-53L"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
PROFILE = load_profile("llamacpp")
SHA = "434a94cd9fcbec9f21944e14354ff958d59ac01e"
DECODE_0, DECODE_4096 = "qwen3-0p6b-synth/decode@0", "qwen3-0p6b-synth/decode@4096"
PREFILL = "qwen3-0p6b-synth/prefill@4096"


def _results() -> dict[str, Any]:
    return json.loads((RUN / "aa-53.results.json").read_text())


def _box(tmp_path: Path) -> BoxConfig:
    return BoxConfig(name="h100-2", kind="local", workdir=str(tmp_path), repo=str(tmp_path))


def stored_floors(tmp_path: Path, noise: dict[str, tuple[float, int]], profile: str = "llamacpp"
                  ) -> tuple[dict[str, float], int]:
    """The floors and degrees a PR's job on the box reads back from the store."""
    store = NoiseStore(tmp_path / "noise.sqlite3")
    try:
        store.record("h100-2", profile, SHA, noise)
        return store.floors("h100-2", profile), store.degrees("h100-2", profile)
    finally:
        store.close()


def _noisy(tmp_path: Path) -> calibrate_report.WitnessMargins:
    floors, df = stored_floors(tmp_path, witness_noise(_results()))
    return unruled(floors, df, _results(), PROFILE, POLICY, _box(tmp_path), SHA)


def test_the_noisy_host_names_the_two_witnesses_that_miss_and_not_the_third(
        tmp_path: Path) -> None:
    """decode@4096's witness (no work_s: rule 2's 32 pairs) misses about one time in two,
    decode-0 at its capped 64 pairs about one in six; prefill-4096-at-4096, also capped at 64,
    misses ~6e-4, under the 0.1% a PR: not named."""
    found = _noisy(tmp_path)
    by = {u.witness: u for u in found.unruled}
    assert set(by) == {"prefill-4k-decode-896", "decode-0"}
    shipped, depth0 = by["prefill-4k-decode-896"], by["decode-0"]
    assert (shipped.cell, shipped.pairs, shipped.sized) == (DECODE_4096, 32, False)
    assert (depth0.cell, depth0.pairs, depth0.sized) == (DECODE_0, 64, True)
    assert 0.3 < shipped.miss < 0.7 and 0.1 < depth0.miss < 0.3
    assert shipped.floor_s == pytest.approx(0.0802, abs=1e-4) and shipped.profile_floor_s == 0.0079
    # past the cap both: the docs' "about 300" and "about 190" pairs
    assert shipped.needed is not None and 250 < shipped.needed < 350
    assert depth0.needed is not None and 150 < depth0.needed < 250


def test_the_miss_is_witness_sizing_s_at_the_job_s_own_last_look(tmp_path: Path) -> None:
    """Cross-check against the job a PR on this box gets (make_job with the stored floors), the
    cell's work by main's printed rates as tests/test_llamacpp_h100_53l.py takes it; the third
    witness's miss there is under the target, which is why it is not named."""
    floors, df = stored_floors(tmp_path, witness_noise(_results()))
    job = make_job(PROFILE, POLICY, _box(tmp_path), SHA, SHA, sd_floors=floors, floor_df=df)
    cells = {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in _results()["cells"]}
    miss = {}
    for w in (w for r in job.runs for w in r.witnesses):
        [(key, tokens)] = w.cells.items()
        logs = [math.log(s["value"]) for s in cells[key]["samples"] if s["side"] == "base"]
        base = math.exp(sum(logs) / len(logs))  # main's geometric mean rate
        miss[key] = witness_sizing.miss(w.looks[-1], w.looks, Floor(w.sd_floor_s, w.floor_df),
                                        job.rule.witness_margin * tokens / base, w.rule_version)
    found = _noisy(tmp_path)
    assert {u.cell: u.miss for u in found.unruled} == pytest.approx(
        {k: p for k, p in miss.items() if k != PREFILL}, rel=1e-6)
    assert miss[PREFILL] < witness_sizing.FALSE_FLAGS_PER_PR
    assert found.chances == pytest.approx(miss, rel=1e-6)
    assert found.any_miss == pytest.approx(1 - math.prod(1 - p for p in miss.values()))


def test_the_warning_says_what_it_means_and_the_pr_s_chance_once(tmp_path: Path) -> None:
    lines = _noisy(tmp_path).lines()
    assert len(lines) == 3
    shipped, depth0, pr = lines
    assert shipped.startswith("warning: witness prefill-4k-decode-896 (rules in "
                              f"{DECODE_4096}): noise 0.0802 s per pair, 10.2 times the "
                              "profile's floor (0.0079 s)")
    assert "(32 pairs: no work_s, so not sized)" in shipped and "1.5% slowdown" in shipped
    assert "about 50 in 100 honest unchanged PRs on this box will be inconclusive for " \
        f"{DECODE_4096} (not believed: slowdown not ruled out)" in shipped
    assert "sized past the cap of 64" in shipped
    assert "(64 pairs, sized to the cap of 64)" in depth0 and "about 18 in 100" in depth0
    assert "prefill-4096-at-4096" not in " ".join(lines)
    assert pr.startswith("warning: an honest unchanged PR on this box") and \
        "about 59 in 100 such PRs will be eval:inconclusive" in pr
    assert all("calibrate again with --witnesses" in line for line in (pr,)) and \
        "calibrate again" not in shipped + depth0  # what to do: said once


def test_the_profile_s_own_floors_warn_of_nothing(tmp_path: Path) -> None:
    """53L's quiet host: the profile's floors (an uncalibrated store), then the same floors
    stored as the box's own: no witness named, the PR's chance far under the target."""
    for floors, df in (({}, 0), stored_floors(tmp_path, {
            f"witness:{w.name}": (w.sd_floor_s, 16) for r in PROFILE.runs for w in r.witnesses})):
        found = unruled(floors, df, _results(), PROFILE, POLICY, _box(tmp_path), SHA)
        assert found.unruled == [] and found.lines() == []
        assert found.any_miss < witness_sizing.FALSE_FLAGS_PER_PR / 100


def test_the_threshold_is_the_per_pr_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target under prefill-4096-at-4096's miss (~6e-4) names it too: the sizing's own target
    decides (read where the warning is made, not copied), and the job's sizing is unchanged by it
    here (both depth witnesses are at the cap already)."""
    floors, df = stored_floors(tmp_path, witness_noise(_results()))
    monkeypatch.setattr(witness_sizing, "FALSE_FLAGS_PER_PR", 5e-4)
    found = unruled(floors, df, _results(), PROFILE, POLICY, _box(tmp_path), SHA)
    assert {u.witness for u in found.unruled} == {"prefill-4k-decode-896", "decode-0",
                                                  "prefill-4096-at-4096"}


def test_in_words() -> None:
    assert calibrate_report.in_words(0.5) == "about 50 in 100"
    assert calibrate_report.in_words(0.0042) == "about 4 in 1,000"


def test_calibrate_warns_and_still_stores_the_floors(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The command, its A/A replaced by the noisy host's pairs: the witness warnings on stderr,
    the floors stored, exit 0 (a warning, as the cells' is)."""
    from evalbot.evaluation import pipeline
    from evalbot.service import pool

    class _Box:
        def close(self) -> None:
            pass

    monkeypatch.setattr(pool, "open_box", lambda config: _Box())
    monkeypatch.setattr(pipeline, "evaluate", lambda *a, **k: _results())
    store = tmp_path / "s.sqlite3"
    got = CliRunner().invoke(calibrate_cmd, [
        "--repo", str(tmp_path), "--store", str(store), "--sha", SHA, "--profile", "llamacpp",
        "--box", "h100-2", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path)])
    assert got.exit_code == 0, got.output
    assert "warning: witness prefill-4k-decode-896" in got.stderr
    assert "warning: witness decode-0" in got.stderr
    assert "warning: witness prefill-4096-at-4096" not in got.stderr
    assert got.stderr.count("warning: an honest unchanged PR on this box") == 1
    kept = NoiseStore(store)
    try:
        assert "witness:decode-0" in kept.floors("h100-2", "llamacpp")
    finally:
        kept.close()


@pytest.mark.parametrize("name", ["demo", "demo-cut"])
def test_a_quiet_demo_box_is_warned_of_nothing(name: str, tmp_path: Path) -> None:
    """The shipped demo (and the guide's cut of it, tests/test_setup_guide.py's calibrate) at
    its profile's floors, the cells' work by a recorded demo A/A's printed rates (the `neutral`
    demo: main's decode@64 work ~0.3 s, decode@1024's and prefill@1024's by theirs): quiet.
    The chance depends on the box's pace at a fixed floor (decode-64 misses 1e-3 only where
    main's 128 steps take under ~0.13 s), so the guide's run on a faster machine could warn:
    this is the recorded A/A's, not a live one's."""
    from tests.demo_profile import cut_demo_profile

    profile = load_profile("demo" if name == "demo" else str(cut_demo_profile(tmp_path)))
    results = json.loads((ROOT / "tests" / "data" / "comments" /
                          "demo-neutral.results.json").read_text())
    found = unruled({}, 0, results, profile, POLICY, _box(tmp_path), "a" * 40)
    assert found.lines() == [] and found.any_miss < witness_sizing.FALSE_FLAGS_PER_PR
    # every covered cell judged: none skipped for want of its work's seconds
    assert set(found.chances) == {c for r in profile.runs for w in r.witnesses for c in w.cells}


def test_without_the_a_a_s_rates_a_witness_s_work_s_stands_in(tmp_path: Path) -> None:
    """No printed rates: decode-0 and prefill-4096-at-4096 are judged on their `work_s` (53L's
    main: 0.5648 s, more than this host's 0.449 s, so decode-0 misses less, still above the
    target); the shipped witness, which has none, cannot be judged and is left out."""
    floors, df = stored_floors(tmp_path, witness_noise(_results()))
    found = unruled(floors, df, None, PROFILE, POLICY, _box(tmp_path), SHA)
    assert set(found.chances) == {DECODE_0, PREFILL}
    [depth0] = found.unruled
    assert depth0.witness == "decode-0" and depth0.work_s == 0.5648
    assert 0.01 < depth0.miss < _noisy(tmp_path).chances[DECODE_0]
