"""One host per store, and one `evalbot serve` per store: checked before the store is opened.

The store is SQLite in WAL mode: its processes share an index through the memory-mapped `-shm`
file, which a network filesystem does not keep coherent between hosts (SQLite's documentation:
WAL does not work over a network filesystem), and the publication claims and leases are timed on
the host's monotonic clock. So every process of a store runs on one host; a second host is
refused at start, before it opens (and so changes) anything:

- `<store>.host` names the host using the store (its kernel boot id: one monotonic clock) and
  carries a heartbeat, a fresh token written every `beat_s` (the config's `service.host_beat_s`)
  by each `serve` and `worker` of it, and that interval. A process of another host watches the
  file for STALE_BEATS of the longer of its own and the record's intervals, by its own monotonic
  clock (a record without one: BEAT_S): a token that
  changes means the other host is alive, and the process is refused with an error naming it; an
  unchanged one means that host is gone (powered off, rebooted), and the store is taken over. A
  process that later finds another host's record in the file (two hosts took over at once)
  reports it lost (`held()`), and the service stops.
- `serve` (and `webhook`: each runs the dispatcher) also hold an exclusive lock on
  `<store>.serve.lock` for their whole life; the kernel releases it when the process dies
  (SIGKILL included). A second one on the store is refused, naming the first one's pid.
Plain files with atomic renames, no SQLite: read before the store is opened.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

from evalbot.store.leasing import HOST

log = logging.getLogger("evalbot.store")
BEAT_S = 5.0  # ServiceConfig.host_beat_s's default, and a record's that names none
STALE_BEATS = 3  # no beat for this many intervals: the host is gone


class StoreInUse(Exception):
    """Another host, or another serve, uses the store; the message names it (the commands turn
    it into their one-line error)."""


class StoreOwner:
    """This process's hold on a store: the host record it beats, the serve lock it holds."""

    def __init__(self, store: Path, serving: bool = False, host: str = HOST,
                 beat_s: float = BEAT_S) -> None:
        self.store, self.host_file = store, Path(f"{store}.host")
        self.host, self.lost, self.beat_s = host, "", beat_s
        self._lock: IO[str] | None = _serve_lock(store) if serving else None
        self._wait_for_other_host()
        self._stop = threading.Event()
        self._beat()
        threading.Thread(target=self._beating, daemon=True, name="store-owner").start()

    def held(self) -> bool:
        return not self.lost

    def release(self) -> None:
        self._stop.set()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor drops the flock

    def _wait_for_other_host(self) -> None:
        first = _read(self.host_file)
        if first is None or first.get("boot_id") == self.host:
            return
        since, stale_s = time.monotonic(), STALE_BEATS * max(self.beat_s, _beat_of(first))
        while time.monotonic() - since < stale_s:
            time.sleep(0.2)
            now = _read(self.host_file)
            if now is not None and now.get("beat") != first.get("beat") \
                    and now.get("boot_id") != self.host:
                raise StoreInUse(
                    f"{self.store}: the store is in use by host "
                    f"{now.get('hostname', '?')!r} (pid {now.get('pid', '?')}, boot id "
                    f"{now.get('boot_id', '?')}): a store serves one host (docs/service.md). "
                    "Run this evalbot on that host, or give this host a store of its own")
        log.warning("store: host %r (boot id %s) stopped beating %.0f s ago; taking the store "
                    "over", first.get("hostname"), first.get("boot_id"), stale_s)

    def _beat(self) -> None:
        record = {"boot_id": self.host, "hostname": socket.gethostname(), "pid": os.getpid(),
                  "beat": uuid.uuid4().hex, "beat_s": self.beat_s, "at": time.time()}
        tmp = self.host_file.with_name(f"{self.host_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.host_file)  # atomic: a reader sees the old or the new record

    def _beating(self) -> None:
        while not self._stop.wait(self.beat_s):
            now = _read(self.host_file)
            if now is not None and now.get("boot_id") != self.host:
                self.lost = (f"host {now.get('hostname')!r} (boot id {now.get('boot_id')}) "
                             "took the store over")
                log.critical("store: %s; this process stops using it", self.lost)
                return
            try:
                self._beat()
            except OSError as exc:  # a full disk: the beat is late, the store goes on
                log.error("store: heartbeat not written: %s", exc)


def _serve_lock(store: Path) -> IO[str]:
    handle = open(f"{store}.serve.lock", "a+")  # noqa: SIM115 (held open for the process's life)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        handle.close()
        raise StoreInUse(f"{store}: another `evalbot serve` (pid {pid}) runs on "
                          "this store; one serve per store (more boxes: `evalbot worker "
                          "--box NAME` beside it)") from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def _beat_of(record: dict[str, Any]) -> float:
    """The interval a host record says its host beats at (BEAT_S where it names none)."""
    beat = record.get("beat_s")
    return float(beat) if isinstance(beat, int | float) and beat > 0 else BEAT_S


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # none yet, or being replaced: the next read sees it
    return doc if isinstance(doc, dict) else None
