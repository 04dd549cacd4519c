"""Store migrations and backups on real SQLite files; results files of older shapes upgraded."""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from evalbot.cli import cli
from evalbot.config.errors import EvalbotError
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.results import upgrade, validate
from evalbot.grading.grade import grade
from evalbot.service.migrations import read_results
from evalbot.store.jobs import Store
from evalbot.store.migrations import LATEST, backup, current_version, migrate
from tests.graded_history import measure, policy, record
from tests.stub_engine import make_repo

CHUNK = {"positions": 64, "base_top1": 60, "head_top1": 60, "head_only_right": 0,
         "base_only_right": 0, "base_kl_sum": 1.0, "head_kl_sum": 1.0, "kl_diff_sum": 0.0}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, Any],
                                                                dict[str, Any]]:
    root = tmp_path_factory.mktemp("stub")
    repo, main, shas = make_repo(root, {"faster": {"decode": 1300.0, "prefill": 1.3e6}})
    results, verdict = measure(repo, main, shas["faster"], root / "job")
    return main, shas["faster"], results, verdict


def _old_shape(results: dict[str, Any]) -> dict[str, Any]:
    """The same results as the first v1 harness wrote them: without the later fields."""
    old = json.loads(json.dumps(results))
    del old["box"]["name"]
    for cell in old["cells"]:
        del cell["stopped"]
    old["correctness"] = {"seed": 7, "identical": True, "chunks": [CHUNK, CHUNK]}  # no `path`
    return old


def test_upgrade_reads_the_first_v1_shape_and_refuses_others(measured):
    _main, _head, results, _verdict = measured
    old = _old_shape(results)
    with pytest.raises(ContractError, match="path"):
        validate(old)
    new = validate(upgrade(old))
    assert new["correctness"]["path"] == "" and new["box"]["name"] == ""
    assert "path" not in old["correctness"]  # the input is not modified
    assert upgrade(results) == results  # a current document passes through unchanged
    with pytest.raises(ContractError, match="newer than this evalbot reads"):
        upgrade({**results, "schema": "evalbot.results/2"})
    with pytest.raises(ContractError, match="no upgrade path"):
        upgrade({**results, "schema": "something/1"})


def test_read_results_names_the_file_and_the_problem(measured, tmp_path):
    _main, _head, results, _verdict = measured
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_old_shape(results)))
    assert read_results(path)["correctness"]["path"] == ""
    path.write_text("{not json")
    with pytest.raises(EvalbotError, match="results.json: not a readable results file"):
        read_results(path)


def test_migrate_applies_in_order_upgrades_stored_results_and_is_idempotent(measured, tmp_path):
    main, head, results, verdict = measured
    store_path = tmp_path / "evalbot.sqlite3"
    store = Store(store_path)
    job_id = record(store, "o/r", 1, main, head, _old_shape(results), verdict)
    store.close()
    got = CliRunner().invoke(cli, ["migrate", "--store", str(store_path), "--check"])
    assert got.exit_code != 0 and "4 migration(s) pending" in str(got.exception)
    got = CliRunner().invoke(cli, ["migrate", "--store", str(store_path)])
    assert got.exit_code == 0, got.output
    assert "v4 upgrade stored results: 1 results document(s) upgraded" in got.output
    db = sqlite3.connect(store_path)
    assert [r[0] for r in db.execute("SELECT version FROM schema_migrations ORDER BY version")] \
        == [1, 2, 3, 4]
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"overrides", "shadow_log", "box_health", "box_noise"} <= tables
    db.close()
    [backup_file] = list(tmp_path.glob("evalbot.sqlite3.pre-v4.*.bak"))
    assert current_version(backup_file) == 0  # the snapshot from before the migrations
    stored = Store(store_path).history(pr=1)[0]
    assert stored["job_id"] == job_id and stored["results"]["correctness"]["path"] == ""
    assert grade(validate(stored["results"]), policy())["kind"] == verdict["kind"]
    assert migrate(store_path) == []  # nothing pending the second time
    got = CliRunner().invoke(cli, ["migrate", "--store", str(store_path), "--check"])
    assert got.exit_code == 0 and f"schema version {LATEST} (latest)" in got.output


def test_a_store_from_a_newer_evalbot_is_refused(tmp_path):
    store_path = tmp_path / "s.sqlite3"
    Store(store_path).close()
    migrate(store_path)
    db = sqlite3.connect(store_path)
    db.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', 0)")
    db.commit()
    db.close()
    with pytest.raises(EvalbotError, match="schema version 99, this evalbot knows up to"):
        migrate(store_path)


def test_online_backup_while_the_service_writes(tmp_path):
    store_path = tmp_path / "evalbot.sqlite3"
    store = Store(store_path)
    for i in range(300):
        store.enqueue("o/r", i, f"{i:040x}", "default")
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        own = Store(store_path)  # its own connection, as the service's threads have
        i = 1000
        while not stop.is_set():
            own.enqueue("o/r", i, f"{i:040x}", "default")
            written.append(i)
            i += 1
        own.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 20:
            stop.wait(0.01)
        out = backup(store_path, tmp_path / "backups" / "copy.sqlite3")
    finally:
        stop.set()
        thread.join()
    copy = Store(out)
    count = len(copy.jobs())
    assert 300 + 20 <= count <= 300 + len(written)  # a consistent snapshot from mid-writing
    assert copy.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    copy.close()
    got = CliRunner().invoke(cli, ["backup", "--store", str(store_path), "--out", str(out)])
    assert got.exit_code != 0 and "exists already" in str(got.exception)
    store.close()
