"""Box health: a real A/A run on the local box against a floor stored in a real SQLite file;
the metrics text from a real store, served over HTTP; JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.remote.local import LocalBox
from evalbot.service.calibrate import aa_noise
from evalbot.service.health import (
    MetricsApp,
    drifted,
    metrics_text,
    periodic_aa,
    setup_json_logging,
)
from evalbot.store.health import Health, HealthStore
from evalbot.store.jobs import Store
from evalbot.store.noise import NoiseStore
from tests.graded_history import measure, record
from tests.stub_engine import job_doc, make_repo

STRICT = 1e-4  # false-alarm rate for the tests: a quiet box must never be flagged by chance


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    return make_repo(tmp_path_factory.mktemp("stub"), {"noisy": {"noise": 0.02},
                                                      "faster": {"decode": 1300.0,
                                                                 "prefill": 1.3e6}},
                     main={"noise": 0.001})


def _aa_job(stub: Any, sha_name: str, job_id: str) -> Any:
    repo, main, shas = stub
    sha = main if sha_name == "main" else shas[sha_name]
    doc: dict[str, Any] = job_doc(repo, sha, sha, looks=[12], sd_floor=1e-6)
    doc["job_id"] = job_id
    return parse_job(doc)


def test_periodic_aa_marks_a_drifting_box_unhealthy_and_says_so_once(stub, tmp_path):
    store_path = tmp_path / "evalbot.sqlite3"
    box_config = BoxConfig(name="gpu1", kind="local", workdir=str(tmp_path / "box"), repo="",
                           trusted=True, python=sys.executable)
    box = LocalBox("gpu1", box_config.workdir)
    told: list[str] = []
    # the floor: what `evalbot calibrate` stored when the box was fine
    calm = periodic_aa(box, box_config, _aa_job(stub, "main", "aa-1"), "stub", store_path,
                       tmp_path / "o1", told.append, alpha=STRICT)
    assert calm.healthy and calm.worst_ratio is None  # nothing to compare with yet
    results = json.loads((tmp_path / "o1" / "results.json").read_text())
    NoiseStore(store_path).record("gpu1", "stub", "main", aa_noise(results))
    again = periodic_aa(box, box_config, _aa_job(stub, "main", "aa-2"), "stub", store_path,
                        tmp_path / "o2", told.append, alpha=STRICT)
    assert again.healthy and again.worst_ratio is not None and told == []
    # the box gets noisy (the engine at this SHA is 20x noisier: a sick card looks the same)
    for n in (3, 4):
        sick = periodic_aa(box, box_config, _aa_job(stub, "noisy", f"aa-{n}"), "stub",
                           store_path, tmp_path / f"o{n}", told.append, alpha=STRICT)
        assert not sick.healthy and any("noise" in r or "not neutral" in r for r in sick.reasons)
    assert len(told) == 1 and "`gpu1` is unhealthy" in told[0]  # told at the transition only
    health = HealthStore(store_path)
    assert health.healthy_boxes(["gpu1", "gpu2"]) == ["gpu2"]  # never-checked boxes stay usable
    assert [h.healthy for h in health.latest().values()] == [False]


def test_a_failing_aa_run_is_an_unhealthy_box(stub, tmp_path):
    box_config = BoxConfig(name="gpu3", kind="local", workdir=str(tmp_path / "box"),
                           repo="", trusted=True, python=sys.executable)
    job = _aa_job(stub, "main", "aa-broken")
    broken = parse_job({**json.loads(job.to_json()), "base_sha": "f" * 40, "head_sha": "f" * 40})
    health = periodic_aa(LocalBox("gpu3", box_config.workdir), box_config, broken, "stub",
                         tmp_path / "s.sqlite3", tmp_path / "o")
    assert not health.healthy and health.reasons[0].startswith("A/A run failed")


@pytest.mark.parametrize(("floor", "today", "expected"), [
    ((0.01, 12), (0.011, 12), False),  # within noise
    ((0.01, 12), (0.05, 12), True),  # five times noisier
    ((0.01, 12), (0.014, 200), False),  # significant, but not material
    ((0.01, 3), (0.03, 3), False),  # material, but three pairs prove nothing
])
def test_drift_needs_significance_and_size(floor, today, expected):
    assert drifted(floor, today) is expected


def test_metrics_text_reports_queue_durations_verdicts_and_health(stub, tmp_path):
    repo, main, shas = stub
    store_path = tmp_path / "evalbot.sqlite3"
    store = Store(store_path)
    results, verdict = measure(repo, main, shas["faster"], tmp_path / "job")
    record(store, "o/r", 1, main, shas["faster"], results, verdict)
    store.enqueue("o/r", 2, "a" * 40, "default")
    health = HealthStore(store_path)
    health.record(Health("gpu1", "stub", False, ("noise",), 3.2))
    health.record(Health("gpu2", "stub", True, (), 1.1))
    text = metrics_text(store_path)
    lines = set(text.splitlines())
    assert "evalbot_queue_length 1" in lines and 'evalbot_jobs{state="done"} 1' in lines
    assert f'evalbot_verdicts{{kind="improved",headline="{verdict["headline"]}"}} 1' in lines
    assert "evalbot_job_duration_seconds_count 1" in lines
    assert 'evalbot_job_duration_seconds_bucket{le="+Inf"} 1' in lines
    assert {'evalbot_box_healthy{box="gpu1"} 0', 'evalbot_box_healthy{box="gpu2"} 1',
            'evalbot_box_noise_ratio{box="gpu1"} 3.2000'} <= lines
    for line in text.splitlines():  # every sample line is `name{labels} number`
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, MetricsApp(store_path), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as got:
            assert got.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "evalbot_queue_length 1" in got.read().decode()
    finally:
        server.shutdown()
        server.server_close()


def test_metrics_of_a_fresh_store_are_zeros(tmp_path):
    Store(tmp_path / "s.sqlite3").close()
    text = metrics_text(tmp_path / "s.sqlite3")
    assert "evalbot_queue_length 0" in text and "evalbot_job_duration_seconds_count 0" in text


def test_json_logging_writes_one_object_per_line():
    stream = io.StringIO()
    setup_json_logging(stream)
    setup_json_logging(stream)  # twice: still one line per record
    logging.getLogger("evalbot.worker").info("job %s done", "j1",
                                             extra={"fields": {"job": "j1", "box": "gpu1"}})
    [line] = stream.getvalue().splitlines()
    doc = json.loads(line)
    assert (doc["msg"], doc["job"], doc["box"], doc["level"]) == ("job j1 done", "j1", "gpu1",
                                                                 "INFO")


# ---- the worker: health gates leasing, the periodic A/A runs between jobs ------------------------
def _service_worker(tmp_path: Path, repo: Path, aa_every_s: float) -> tuple[Any, Any]:
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.worker import Settings, Worker
    from tests.service_env import write_config

    config = write_config(tmp_path, repo)
    policy = load_labels(config.labels_file).policy("default")
    worker = Worker("w0", config.boxes[0], load_profile(config.profile), policy, config.store,
                    tmp_path / "results", Settings(backoff_s=0.0, poll_s=0.05,
                                                   aa_every_s=aa_every_s))
    return config, worker


def test_an_unhealthy_box_gets_no_jobs_until_a_check_passes(stub, tmp_path):
    repo, _main, shas = stub
    config, worker = _service_worker(tmp_path, repo, aa_every_s=0.0)
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["noisy"], worker.policy.ident)
    health = HealthStore(config.store)
    health.record(Health("box-0", "stub", False, ("decode@128: noise 3x the floor",), 3.0))
    assert not worker.step(store)  # nothing leased
    assert store.get(job.id).state == "queued" and store.leases() == []
    health.record(Health("box-0", "stub", True, (), 1.0))  # a later A/A passed
    assert worker.step(store) and store.get(job.id).state == "done"
    health.close()


def test_a_due_aa_runs_between_jobs_when_the_worker_is_idle(stub, tmp_path):
    repo, main, shas = stub
    config, worker = _service_worker(tmp_path, repo, aa_every_s=0.5)
    store = Store(config.store)
    first = store.enqueue("o/r", 1, shas["noisy"], worker.policy.ident)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait = HealthStore(config.store)
        for _ in range(1200):  # the job, then (idle, 0.5 s after the start) the A/A
            if store.get(first.id).state == "done" and "box-0" in wait.latest():
                break
            threading.Event().wait(0.05)
        checked = wait.latest()["box-0"]
        assert checked.healthy, checked.reasons  # A/A on an unchanged main: neutral
        second = store.enqueue("o/r", 2, shas["noisy"], worker.policy.ident)
        for _ in range(1200):
            if store.get(second.id).state == "done":
                break
            threading.Event().wait(0.05)
    finally:
        worker.stopping.set()
        thread.join(timeout=120)
    one, two = (store.leases(j.id)[0] for j in (first, second))
    assert one["ended"] <= checked.at <= two["started"]  # between the two jobs, no lease held
    aa_dirs = list((Path(config.boxes[0].workdir) / "jobs").glob("aa-*"))
    assert aa_dirs and json.loads((aa_dirs[0] / "status.json").read_text())["step"] == "done"
    results = json.loads(next((tmp_path / "results" / "aa").rglob("results.json")).read_text())
    assert results["base"]["sha"] == results["head"]["sha"] == main
    wait.close()
