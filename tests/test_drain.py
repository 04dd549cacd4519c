"""SIGTERM during a job loses nothing: a real worker process is signalled mid-measurement, hands
its lease back, and the next worker re-attaches to the same harness run on the local box."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.evaluation import pipeline
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.remote.local import LocalBox
from evalbot.service.drain import drain
from evalbot.service.worker import Settings, Worker
from evalbot.store.jobs import Store
from tests.graded_history import policy
from tests.service_env import wait_for, write_config
from tests.stub_engine import job_doc, make_repo

WORKER = r'''
import json, sys, threading
from pathlib import Path
from evalbot.engine.contract.job import parse_job
from evalbot.service import drain
from evalbot.evaluation import pipeline
from evalbot.config.settings import BoxConfig
from evalbot.store.jobs import Store
from evalbot.remote.local import LocalBox

store_path, doc_path, workdir, out = map(Path, sys.argv[1:5])
stop = drain.on_signals()

class Worker:
    name = "worker-a"
    stopping = threading.Event()

job = Store(store_path).lease(Worker.name, 600)
doc = json.loads(doc_path.read_text())
doc["job_id"] = job.id
box_config = BoxConfig(name="local", kind="local", workdir=str(workdir), repo="", trusted=True,
                       python=sys.executable)
threading.Thread(target=pipeline.evaluate, daemon=True,
                 args=(LocalBox("local", str(workdir)), box_config, parse_job(doc), out),
                 kwargs={"poll_s": 0.1}).start()
stop.wait()
print(json.dumps(drain.drain(store_path, [Worker], grace_s=0.5).__dict__), flush=True)
'''


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    # about 0.1 s of work per sample: 20 pairs keep the harness busy for several seconds
    return make_repo(tmp_path_factory.mktemp("stub"),
                     {"faster": {"decode": 1300.0, "prefill": 1.3e6, "work_s": 0.05}},
                     main={"work_s": 0.05})


def _status(jobdir: Path) -> str:
    try:
        return str(json.loads((jobdir / "status.json").read_text()).get("step", ""))
    except (OSError, ValueError):
        return ""


def test_sigterm_mid_job_hands_back_and_the_next_worker_reattaches(stub, tmp_path):
    repo, main, shas = stub
    store_path, workdir = tmp_path / "evalbot.sqlite3", tmp_path / "box"
    store = Store(store_path)
    queued = store.enqueue("o/r", 1, shas["faster"], policy().ident, base_sha=main)
    doc: dict[str, Any] = job_doc(repo, main, shas["faster"], looks=[20], sd_floor=0.05)
    (tmp_path / "job.json").write_text(json.dumps(doc))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(store_path),
                             str(tmp_path / "job.json"), str(workdir), str(tmp_path / "out-a")],
                            stdout=subprocess.PIPE, text=True, env=env)
    jobdir = workdir / "jobs" / queued.id
    wait_for("the harness to measure", lambda: _status(jobdir) == "speed", 60.0)
    pid_before = (jobdir / "harness.pid").read_text()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"finished": [], "handed_back": [queued.id]}
    assert _status(jobdir) != "done"  # the harness is still measuring, untouched
    row = store.get(queued.id)
    assert row.state == "running" and row.lease_expires is not None
    assert row.lease_expires <= time.time()  # handed back: the next lease takes it at once

    again = store.lease("worker-b", 600)  # "after the restart"
    assert again is not None and again.id == queued.id
    doc["job_id"] = queued.id
    box_config = BoxConfig(name="local", kind="local", workdir=str(workdir), repo="",
                           trusted=True, python=sys.executable)
    results = pipeline.evaluate(LocalBox("local", str(workdir)), box_config, parse_job(doc),
                                tmp_path / "out-b", poll_s=0.1)
    assert (jobdir / "harness.pid").read_text() == pid_before  # re-attached, not restarted
    assert list((workdir / "jobs").iterdir()) == [jobdir]  # no second attempt directory
    assert all(len(c["samples"]) == 40 for c in results["cells"])  # every pair measured
    verdict = grade(results, policy())
    assert verdict["kind"] == "improved"
    assert store.finish(queued.id, "worker-b", verdict, results)
    outcomes = [lease["outcome"] for lease in store.leases(queued.id)]
    assert outcomes == ["handed-back", "done"]
    assert store.get(queued.id).tries == 1  # the hand-back was not counted as a try
    assert store.history(pr=1)[0]["job_id"] == queued.id


def test_a_job_that_finishes_within_the_grace_is_not_handed_back(tmp_path):
    store_path = tmp_path / "evalbot.sqlite3"
    store = Store(store_path)
    store.enqueue("o/r", 2, "a" * 40, "default")
    job = store.lease("worker-c", 600)
    assert job is not None

    class Worker:
        name = "worker-c"
        stopping = threading.Event()

    def finish_soon() -> None:
        own = Store(store_path)
        time.sleep(0.3)
        own.fail(job.id, "worker-c", "done in the grace", retry=False)
        own.close()

    thread = threading.Thread(target=finish_soon)
    thread.start()
    report = drain(store_path, [Worker], grace_s=30.0, poll_s=0.05)
    thread.join()
    assert Worker.stopping.is_set()
    assert report.finished == [job.id] and report.handed_back == []
    assert store.get(job.id).state == "failed"


def test_restarts_never_make_a_job_give_up(tmp_path):
    """Four SIGTERM restarts in a row (max_tries is 3): each hand-back gives its try back, so
    the job is measured, not failed as "lost its worker"."""
    repo, _main, shas = make_repo(tmp_path / "engine", {"faster": {"decode": 1300.0}})
    config = write_config(tmp_path, repo)
    ident = policy().ident
    store = Store(config.store)
    queued = store.enqueue("o/r", 1, shas["faster"], ident)
    for restart in range(4):
        leased = store.lease(f"worker-{restart}", 600)
        assert leased is not None and leased.id == queued.id and leased.tries == 1
        assert store.hand_back(queued.id, f"worker-{restart}")
    assert not store.hand_back(queued.id, "worker-0")  # no longer worker-0's lease
    worker = Worker("worker-last", config.boxes[0], load_profile(config.profile), policy(),
                    config.store, tmp_path / "results", Settings(max_tries=3))
    assert worker.step(store)
    assert store.get(queued.id).state == "done" and store.get(queued.id).tries == 1
    assert store.history()[0]["verdict"]["kind"] == "improved"
    outcomes = [lease["outcome"] for lease in store.leases(queued.id)]
    assert outcomes == ["handed-back"] * 4 + ["done"]


def test_a_renewal_that_races_the_hand_back_cannot_revive_the_lease(tmp_path):
    """The race behind a flaky drain test: the Renewal read "not handed back", then the drain
    handed the lease back, then the Renewal renewed. The renewal must lose, whatever the order."""
    store = Store(tmp_path / "store.sqlite")
    job = store.enqueue("o/r", 1, "a" * 40, policy().ident)
    assert store.lease("worker-d", 600) is not None
    assert store.renew(job.id, "worker-d", 600)  # held: renewing works
    assert store.hand_back(job.id, "worker-d")
    assert not store.renew(job.id, "worker-d", 600)  # the stale check passed; the update must not
    row = store.get(job.id)
    assert row.lease_expires is not None and row.lease_expires <= time.time()
    again = store.lease("worker-e", 600)
    assert again is not None and again.id == job.id


@pytest.mark.parametrize("taken_at_once", [False, True])
def test_a_drained_worker_stops_renewing_and_never_kills_the_run_it_handed_back(
        tmp_path, taken_at_once):
    repo, _main, shas = make_repo(tmp_path / "engine", {"slow": {"work_s": 0.6}})
    config = write_config(tmp_path, repo)
    store = Store(config.store)
    job = store.enqueue("o/r", 1, shas["slow"], policy().ident)
    worker = Worker("worker-d", config.boxes[0], load_profile(config.profile), policy(),
                    config.store, tmp_path / "results", Settings(lease_ttl_s=0.6))
    thread = threading.Thread(target=lambda: worker.step(Store(config.store)))
    thread.start()
    jobdir = Path(config.boxes[0].workdir) / "jobs" / job.id
    wait_for("the harness to measure", lambda: _status(jobdir) == "speed", 60.0)
    report = drain(config.store, [worker], grace_s=0.0)
    assert report.handed_back == [job.id]
    pid = (jobdir / "harness.pid").read_text()
    if not taken_at_once:
        time.sleep(1.0)  # five renewal periods of the old worker
        row = store.get(job.id)
        assert row.lease_expires is not None and row.lease_expires <= time.time()  # not renewed
    again = store.lease("worker-e", 600)  # the next worker takes it while the old one lives
    assert again is not None and again.id == job.id
    time.sleep(1.0)  # (taken at once: the old Renewal finds the job another worker's)
    assert store.get(job.id).lease_owner == "worker-e"
    assert _running(int(pid))  # the old worker's Renewal lost the job but killed nothing
    thread.join(timeout=90)
    assert not thread.is_alive()


def _running(pid: int) -> bool:
    """Alive and neither stopped (SIGSTOP, the first step of a kill) nor a zombie."""
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().split(") ")[-1][0] not in "TZ"
