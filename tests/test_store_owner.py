"""The store's host record beats at the config's interval (evalbot.store.owner): another host
judges it stale by the longer of its own interval and the one the record names, so a host whose
config beats slowly is not taken over by one whose config beats fast."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest

from evalbot.store.leasing import HOST
from evalbot.store.owner import StoreInUse, StoreOwner


def test_a_slow_beating_host_is_not_taken_over_by_a_fast_config(tmp_path: Path) -> None:
    store = tmp_path / "evalbot.sqlite3"
    host_file = Path(f"{store}.host")
    record = {"boot_id": str(uuid.uuid4()), "hostname": "other", "pid": 1, "beat": "a",
              "beat_s": 5.0}  # stale after 15 s by its own interval
    host_file.write_text(json.dumps(record))
    beaten = threading.Event()

    def beat_once() -> None:  # its next beat, long after 3 of the watcher's 0.1 s beats
        if not beaten.wait(1.0):
            host_file.write_text(json.dumps({**record, "beat": "b"}))

    beater = threading.Thread(target=beat_once)
    beater.start()
    try:
        with pytest.raises(StoreInUse, match="in use by host 'other'"):
            StoreOwner(store, beat_s=0.1)
    finally:
        beaten.set()
        beater.join()
    assert json.loads(host_file.read_text())["boot_id"] == record["boot_id"]


def test_a_host_that_stopped_beating_is_taken_over_and_the_record_names_the_interval(
        tmp_path: Path) -> None:
    store = tmp_path / "evalbot.sqlite3"
    host_file = Path(f"{store}.host")
    host_file.write_text(json.dumps({"boot_id": str(uuid.uuid4()), "hostname": "gone", "pid": 1,
                                     "beat": "a", "beat_s": 0.1}))
    owner = StoreOwner(store, beat_s=0.2)  # 3 beats of 0.2 s without a change: gone
    try:
        now = json.loads(host_file.read_text())
        assert (now["boot_id"], now["beat_s"]) == (HOST, 0.2)
        assert owner.held()
    finally:
        owner.release()
