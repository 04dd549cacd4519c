"""A stale witness floor is seen in the jobs' own pairs, without box time (issue 46).

evalbot.grading.witness_floor tests main's A/A differences inside recent jobs (main's processes
of pairs 2i and 2i + 1) against the floor the jobs were judged with; while the box refutes it,
the worker leaves the witness unrun, its cells say "not confirmed: witness floor stale, run
`evalbot calibrate`", `evalbot doctor`, /metrics and the dashboard say so, and the periodic A/A
measures the floor again, which ends it.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.grading.witness_floor import (
    MIN_DIFFERENCES,
    WitnessRun,
    check,
    main_differences,
    stale_names,
)
from evalbot.report.dashboard import build_site
from evalbot.report.witness_floors import box_checks, stale_witnesses
from evalbot.service.doctor import witness_floor_checks
from evalbot.service.health import metrics_text
from evalbot.store.health import Health, HealthStore
from evalbot.store.jobs import Store
from tests.stub_engine import make_repo

FLOOR = 0.01


def _samples(main_s: list[float], head_s: list[float] | None = None,
             dropped: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    head_s = head_s or [t - 0.05 for t in main_s]
    out = []
    for p, (b, h) in enumerate(zip(main_s, head_s, strict=True)):
        order = (("base", b), ("head", h)) if p % 2 == 0 else (("head", h), ("base", b))
        out += [{"pair": p, "side": side, "seconds": s, "dropped": p in dropped, "error": ""}
                for side, s in order]
    return out


def _run(main_s: list[float], created: float, floor: float = FLOOR, name: str = "w",
         head_s: list[float] | None = None) -> WitnessRun:
    return WitnessRun(name, floor, 24, _samples(main_s, head_s), created)


def _jobs(rng: np.random.Generator, k: float, jobs: int = 3, pairs: int = 8,
          head_sd: float = 0.0) -> list[WitnessRun]:
    """`jobs` jobs whose main processes scatter so that main's pairs have k x the floor's sd."""
    runs = []
    for j in range(jobs):
        main = list(2.0 + rng.normal(0, k * FLOOR / np.sqrt(2), pairs))
        head = list(1.95 + rng.normal(0, head_sd, pairs)) if head_sd else None
        runs.append(_run(main, 100.0 + j, head_s=head))
    return runs


def test_main_differences_pair_main_with_main_in_measured_order() -> None:
    samples = _samples([2.0, 2.1, 2.3, 2.2, 2.5, 2.4], dropped=(4,))
    samples[-2 if samples[-2]["side"] == "base" else -1]["error"] = "failed"  # pair 5's main
    assert main_differences(samples) == pytest.approx([2.0 - 2.1, 2.3 - 2.2])


def test_a_box_noisier_than_the_floor_makes_it_stale() -> None:
    # 2.5x the floor, 3 jobs of 8 pairs (12 of main's pairs): seen in 9 of 10 such boxes
    rng = np.random.default_rng(1)
    found = [check(_jobs(rng, k=2.5), {})[0] for _ in range(200)]
    assert sum(f.stale for f in found) >= 160
    first = next(f for f in found if f.stale)
    assert (first.df, first.jobs) == (12, 3) and 1.5 < (first.ratio or 0) < 4.0
    assert first.text().startswith("stale, run `evalbot calibrate`: main's pairs")


def test_a_box_as_noisy_as_its_floor_is_rarely_called_stale() -> None:
    rng = np.random.default_rng(2)
    called = sum(bool(stale_names(check(_jobs(rng, k=1.0), {}))) for _ in range(300))
    assert called <= 6  # the test's 1%, and the 1.5x materiality on top


def test_one_job_is_not_a_box_that_changed() -> None:
    [found] = check(_jobs(np.random.default_rng(3), k=10.0, jobs=1, pairs=16), {})
    assert found.df >= MIN_DIFFERENCES and not found.stale


def test_a_head_that_scatters_its_own_times_cannot_make_the_floor_stale() -> None:
    # hostile: the PR's witness processes take 0-3 s at random, every job; main's are steady
    found = check(_jobs(np.random.default_rng(4), k=1.0, jobs=6, head_sd=1.0), {})
    assert [f.stale for f in found] == [False]


def test_a_floor_measured_again_starts_afresh() -> None:
    runs = _jobs(np.random.default_rng(5), k=3.0)  # at 100-102 s, judged with FLOOR
    assert stale_names(check(runs, {})) == {"w"}
    # the periodic A/A stores a new floor at 200 s: no job was judged with it yet
    assert stale_names(check(runs, {"w": (0.03, 200.0)})) == frozenset()
    later = [_run(list(2.0 + np.random.default_rng(6).normal(0, 0.03 / np.sqrt(2), 8)),
                  300.0 + j, floor=0.03) for j in range(3)]
    [found] = check(runs + later, {"w": (0.03, 200.0)})
    assert found.jobs == 3 and found.floor_s == 0.03 and not found.stale


def test_a_witness_without_a_floor_has_nothing_to_be_stale() -> None:
    assert check([_run([2.0, 2.5, 1.5, 2.9] * 2, 1.0, floor=0.0)] * 3, {}) == []


def test_the_periodic_aa_runs_just_the_stale_witnesses(tmp_path: Path) -> None:
    from evalbot.config.resources import LABELS_FILE
    from evalbot.config.settings import BoxConfig
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.calibrate import calibration_job

    box = BoxConfig(name="b", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    policy = load_labels(LABELS_FILE).policy("default")
    profile = load_profile("sparkinfer")
    job = calibration_job(profile, policy, box, "a" * 40, 12, witnesses=True,
                          only={"decode-4096"})
    [spec] = [w for r in job.runs for w in r.witnesses]
    assert (spec.name, spec.looks, spec.sd_floor_s, job.rule.witness_aa) == (
        "decode-4096", (12,), 0.0, True)
    everything = calibration_job(profile, policy, box, "a" * 40, 12, witnesses=True)
    assert len([w for r in everything.runs for w in r.witnesses]) > 1


# ---- end to end: the worker, the store, the harness on a local box ------------------------------
@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"), {"faster": {"decode": 1300.0}},
                     main={"noise": 0.001})


# 0.1 ms: far under what any machine's CPU clock scatters over a 0.5 s witness process
TINY_FLOOR = "sd_floor_s: 0.0001, floor_df: 30"
# A quarter of the stub's 512 decode steps: the test is of the floor, which main's pairs of any
# length refute (a 0.1 ms floor against a CPU clock's scatter), and its ~10 evaluations spent
# most of their time in the witness's processes (97 s of the suite's busiest module).
SHORT_WITNESS = {"steps: 512": "steps: 128", "output_tokens: 513": "output_tokens: 129",
                 '"decode@128": 512': '"decode@128": 128'}


def _worker(tmp_path: Path, repo: Path) -> tuple[Any, Any]:
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.worker import Settings, Worker
    from tests.service_env import write_config

    config = write_config(tmp_path, repo)
    profile = Path(tmp_path / "stub.yaml")
    text = profile.read_text().replace("clock: cpu}", f"clock: cpu, {TINY_FLOOR}}}")
    for shipped, short in SHORT_WITNESS.items():
        assert shipped in text, shipped
        text = text.replace(shipped, short)
    profile.write_text(text)
    policy = load_labels(config.labels_file).policy("default")
    worker = Worker("w0", config.boxes[0], load_profile(str(profile)), policy, config.store,
                    tmp_path / "results", Settings(backoff_s=0.0, poll_s=0.05,
                                                   aa_every_s=30 * 86400.0))
    return config, worker


def _evaluate(worker: Any, store: Store, pr: int, sha: str) -> tuple[dict[str, Any], Path]:
    job = store.enqueue("o/r", pr, sha, worker.policy.ident)
    assert worker.step(store)
    [row] = [h for h in store.history() if h["job_id"] == job.id]
    return row, worker.out_root / job.id


def _witness(row: dict[str, Any]) -> dict[str, Any]:
    return next(w for w in row["results"]["witnesses"] if w["name"] == "decode-128")


def test_a_stale_floor_confirms_nothing_until_the_periodic_aa_measures_it_again(stub, tmp_path):
    repo, _main, shas = stub
    config, worker = _worker(tmp_path, repo)
    store = Store(config.store)
    ran = 0
    while not stale_witnesses(config.store, "box-0", "stub"):  # the jobs' own pairs show it
        row, _ = _evaluate(worker, store, 1 + ran, shas["faster"])
        assert _witness(row)["samples"] and _witness(row)["sd_floor_s"] == 0.0001
        ran += 1
        assert ran <= 6, "six jobs' main pairs did not refute a 0.1 ms floor"
    assert ran >= 2  # one job's pairs are never enough
    # every place an operator looks says so, before any more box time is spent
    text = metrics_text(config.store)
    assert 'evalbot_witness_floor_stale{box="box-0",witness="decode-128"} 1' in text
    [doctor] = list(witness_floor_checks(config.store, "box-0", "stub"))
    assert not doctor.ok and "stale, run `evalbot calibrate`" in doctor.detail
    index = build_site(store, tmp_path / "site").read_text()
    assert "decode-128" in index and "stale: run `evalbot calibrate`" in index

    # the next faster head: its witness is not run, its cell earns no tier, and says why
    row, out = _evaluate(worker, store, 10, shas["faster"])
    record = _witness(row)
    assert (record["stopped"], record["samples"]) == ("floor_stale", [])
    [cell] = [c for c in row["verdict"]["cells"] if c["key"] == "m/decode@128"]
    assert (cell["decision"], cell["confirmation"]) == ("unconfirmed", "floor stale")
    assert row["verdict"]["tier"] is None and row["verdict"]["headline"] == "eval:inconclusive"
    assert "not confirmed: witness floor stale, run `evalbot calibrate`" in \
        " ".join(row["verdict"]["reasons"])
    assert "faster, not confirmed: witness floor stale, run `evalbot calibrate`" in \
        (out / "comment.md").read_text()

    # the periodic A/A comes within the hour, not the configured 30 days
    health = HealthStore(config.store)
    health.record(Health("box-0", "stub", True, (), 1.0, at=time.time() - 7200))
    assert worker.health_check_due()
    checked = worker.check_health()
    assert checked.healthy, checked.reasons
    aa = json.loads(next((tmp_path / "results" / "aa").rglob("results.json")).read_text())
    assert [w["name"] for w in aa["witnesses"] if w.get("source") == "witness"] == ["decode-128"]
    assert stale_witnesses(config.store, "box-0", "stub") == frozenset()
    assert not worker.health_check_due()  # checked just now, nothing stale
    db = sqlite3.connect(config.store)
    [(sd, pairs)] = db.execute("SELECT sd, pairs FROM box_noise WHERE cell = "
                               "'witness:decode-128'").fetchall()
    db.close()
    assert sd > 0.0001 and pairs >= 6

    # from now on the witness runs again, pooled with the floor the box measured
    row, _ = _evaluate(worker, store, 11, shas["faster"])
    record = _witness(row)
    assert record["samples"] and record["sd_floor_s"] == pytest.approx(sd)
    assert 'witness="decode-128"} 0' in metrics_text(config.store)
    db = sqlite3.connect(f"file:{config.store}?mode=ro", uri=True)
    assert [c.witness for c in box_checks(db, "box-0", "stub") if not c.stale] == ["decode-128"]
    db.close()
    health.close()
    store.close()
