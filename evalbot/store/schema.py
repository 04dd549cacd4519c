"""Every table of the bot's store file, in one schema: what a fresh store is created with, the
columns added since (ALTER TABLE ADD COLUMN where absent), and how a store object opens the file.
Every store object opens it through `connect`, so any one of them finds every table, whichever
opened the file first. Migrations that move data, with their versions: store/migrations.py.

And which store errors may pass (`passing_fault`): the store locked by another writer, its disk
full, an I/O error. Each is the store's condition, not one delivery's or one job's: whoever meets
one keeps what it was doing for later (the delivery stays in the inbox, the job stays
unpublished) and holds back a while (evalbot.github.hold), since everything else would meet it
too; once the lock is let go or the disk freed, the work goes on. Any other SQLite error (a
missing table, a constraint, a corrupt file) is a bug or damage and is treated as such.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

Connection = sqlite3.Connection  # what store objects hand the readers in store/witness_runs.py
Error = sqlite3.Error  # what a store's disk or lock failure raises, for callers to catch

TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  repo TEXT NOT NULL, pr INTEGER, head_sha TEXT NOT NULL, base_sha TEXT NOT NULL DEFAULT '',
  policy TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 1,
  state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  lease_owner TEXT, lease_expires REAL,
  tries INTEGER NOT NULL DEFAULT 0,
  created REAL NOT NULL, updated REAL NOT NULL,
  UNIQUE (repo, pr, head_sha, policy, attempt)
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created);
CREATE TABLE IF NOT EXISTS verdicts (
  job_id TEXT PRIMARY KEY REFERENCES jobs(id),
  repo TEXT NOT NULL, pr INTEGER, head_sha TEXT NOT NULL, base_sha TEXT NOT NULL,
  headline TEXT NOT NULL, verdict TEXT NOT NULL, results TEXT NOT NULL, created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, received REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
  id INTEGER PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs(id), worker TEXT NOT NULL,
  box TEXT NOT NULL DEFAULT '', started REAL NOT NULL, ended REAL, outcome TEXT
);
CREATE INDEX IF NOT EXISTS leases_job ON leases (job_id);
CREATE TABLE IF NOT EXISTS verdict_revisions (
  job_id TEXT NOT NULL, policy TEXT NOT NULL, verdict TEXT NOT NULL, replaced REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS inbox (delivery TEXT PRIMARY KEY, event TEXT NOT NULL,
                                  body BLOB NOT NULL, received REAL NOT NULL);
CREATE TABLE IF NOT EXISTS inbox_aside (delivery TEXT PRIMARY KEY, event TEXT NOT NULL,
                                        body BLOB NOT NULL, received REAL NOT NULL,
                                        error TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS admissions (job_id TEXT PRIMARY KEY, repo TEXT NOT NULL,
                                       pr INTEGER, author TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS notes (key TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS claims (subject TEXT PRIMARY KEY, owner TEXT NOT NULL,
                                   host TEXT NOT NULL, pid INTEGER NOT NULL, started TEXT NOT NULL,
                                   at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS approvals (repo TEXT NOT NULL, pr INTEGER NOT NULL,
                                      head_sha TEXT NOT NULL, by TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS approvals_pr ON approvals (repo, pr);
CREATE TABLE IF NOT EXISTS overrides (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  repo TEXT NOT NULL, pr INTEGER NOT NULL, head_sha TEXT NOT NULL,
  action TEXT NOT NULL, who TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  job_id TEXT NOT NULL DEFAULT '', earlier_job TEXT NOT NULL DEFAULT '',
  factor REAL NOT NULL DEFAULT 1.0, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS overrides_pr ON overrides (repo, pr, id);
CREATE TABLE IF NOT EXISTS shadow_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, action TEXT NOT NULL,
  pr INTEGER, sha TEXT NOT NULL DEFAULT '', headline TEXT NOT NULL DEFAULT '',
  kind TEXT NOT NULL DEFAULT '', payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS box_noise (
  box TEXT NOT NULL, profile TEXT NOT NULL, cell TEXT NOT NULL,
  sd REAL NOT NULL, pairs INTEGER NOT NULL, sha TEXT NOT NULL, created REAL NOT NULL,
  PRIMARY KEY (box, profile, cell)
);
CREATE TABLE IF NOT EXISTS box_health (
  id INTEGER PRIMARY KEY AUTOINCREMENT, box TEXT NOT NULL, profile TEXT NOT NULL,
  healthy INTEGER NOT NULL, reasons TEXT NOT NULL, worst_ratio REAL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS box_health_box ON box_health (box, id);
CREATE TABLE IF NOT EXISTS merges (repo TEXT NOT NULL, pr INTEGER NOT NULL,
  head_sha TEXT NOT NULL, main_sha TEXT NOT NULL, merged REAL NOT NULL,
  PRIMARY KEY (repo, main_sha));
"""
# Columns added after their table first shipped: (table, column, declaration).
ADDED = (
    ("jobs", "box", "TEXT"),  # the box of the current or last lease
    ("jobs", "not_before", "REAL NOT NULL DEFAULT 0"),  # retry back-off: not leased before
    ("jobs", "started", "REAL"),  # first start: base is resolved once, then kept
    ("jobs", "published", "REAL"),  # when the final state reached GitHub (NULL: not yet)
    ("verdicts", "stale", "INTEGER NOT NULL DEFAULT 0"),  # main moved since base_sha
    ("verdicts", "box_s", "REAL NOT NULL DEFAULT 0"),  # leased box time of the evaluation
    ("verdicts", "saved_s", "REAL NOT NULL DEFAULT 0"),  # build time saved by cached builds
    ("jobs", "lease_ttl", "REAL"),  # leasing.py: expiry by heartbeat and monotonic clocks
    ("jobs", "lease_beat", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "lease_host", "TEXT"),
    ("jobs", "lease_mono", "REAL"),
    # the inbox's back-off: `due` is on the dispatcher's monotonic clock, which restarts with the
    # host, so the dispatcher clears it at start (Store.inbox_restart)
    ("inbox", "subject", "TEXT"),
    ("inbox", "tries", "INTEGER NOT NULL DEFAULT 0"),
    ("inbox", "due", "REAL NOT NULL DEFAULT 0"),
    ("inbox", "error", "TEXT NOT NULL DEFAULT ''"),
    # publication (Store.publish_later): monotonic deadlines, cleared under a new boot id
    ("jobs", "publish_tries", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "publish_due", "REAL NOT NULL DEFAULT 0"),  # not tried again before
    ("jobs", "unpublished", "TEXT NOT NULL DEFAULT ''"),  # why it was given up ('': not given up)
)


def create(db: sqlite3.Connection) -> None:
    """Every table, index and added column the store file lacks (idempotent)."""
    db.executescript(TABLES)
    for table in dict.fromkeys(t for t, _, _ in ADDED):
        add_missing(db, table, [(c, d) for t, c, d in ADDED if t == table])


def add_missing(db: sqlite3.Connection, table: str, columns: Iterable[tuple[str, str]]) -> None:
    """ALTER TABLE ... ADD COLUMN for each (column, declaration) the table lacks. Two processes
    opening one store may race to add the same column: the loser's duplicate is no error."""
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    for column, decl in columns:
        if column in have:
            continue
        try:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):
                raise


def connect(path: Path, *, shared: bool = False) -> sqlite3.Connection:
    """The store file in WAL mode with every table, autocommitting (a store object opens its own
    transactions); rows read by name. `shared`: usable from the service's other threads."""
    db = sqlite3.connect(Path(path), timeout=30, isolation_level=None,
                         check_same_thread=not shared)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    create(db)
    return db


@contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """The store file opened for reading only (doctor, /metrics, the worker's floor check): a
    reader never creates, migrates or locks it for writing."""
    db = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        yield db
    finally:
        db.close()


# SQLite's result codes (extended codes start with these: SQLITE_IOERR_WRITE, ...) and the
# messages sqlite3_errstr gives them, for errors raised without the code attached.
_KINDS = (("SQLITE_BUSY", "database is locked", "locked"),
          ("SQLITE_LOCKED", "database table is locked", "locked"),
          ("SQLITE_FULL", "database or disk is full", "full"),
          ("SQLITE_IOERR", "disk I/O error", "I/O"))


def passing_fault(exc: BaseException) -> str | None:
    """'locked', 'full' or 'I/O' for a store error that may pass; None for anything else."""
    if not isinstance(exc, sqlite3.OperationalError):
        return None
    name = getattr(exc, "sqlite_errorname", None) or ""
    text = str(exc)
    for code, message, kind in _KINDS:
        if name.startswith(code) or (not name and text.startswith(message)):
            return kind
    return None
