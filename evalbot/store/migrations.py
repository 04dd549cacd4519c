"""Store upgrades and backups: a schema version table, ordered migrations, SQLite online backup.

`schema_migrations` holds one row per applied migration (version, name, when). `migrate` applies
the missing ones in order, each in its own transaction together with its row, after taking an
online backup next to the store; a store newer than this code is refused by name. The tables
themselves are store/schema.py's (every store object creates what is missing when it opens the
file); a migration changes what is in them. `backup` uses sqlite3's backup API, which copies a
consistent snapshot while the service keeps writing. `evalbot migrate` and `evalbot backup`:
evalbot/service/migrations.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalbot.config.errors import EvalbotError
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.results import upgrade
from evalbot.store import schema
from evalbot.store.jobs import Store

_VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sqlite3.Connection], str]  # runs inside the migration's transaction


def _baseline(db: sqlite3.Connection) -> str:
    """Store v1's tables exist (Store created them before the loop); nothing to change."""
    found = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = {"jobs", "verdicts", "deliveries", "meta"} - found
    if missing:
        raise EvalbotError(f"store baseline: tables {sorted(missing)} are missing")
    return "store v1 tables present"


def _history_index(db: sqlite3.Connection) -> str:
    db.execute("CREATE INDEX IF NOT EXISTS verdicts_pr ON verdicts (repo, pr, created)")
    return "index verdicts (repo, pr, created) for history and the dashboard"


def _operations_tables(db: sqlite3.Connection) -> str:
    """The operations' tables, which once came with the objects that kept them: every table of
    store/schema.py, created where missing (statement by statement: executescript would commit
    the migration's transaction)."""
    for statement in (s.strip() for s in schema.TABLES.split(";") if s.strip()):
        db.execute(statement)
    return "overrides, shadow_log, box_health, box_noise"


def _upgrade_stored_results(db: sqlite3.Connection) -> str:
    """Stored results documents brought to the current schema, so re-grading reads them."""
    changed = unreadable = 0
    for job_id, text in db.execute("SELECT job_id, results FROM verdicts").fetchall():
        doc = json.loads(text)
        try:
            new = upgrade(doc)
        except ContractError:
            unreadable += 1  # kept as stored; `evalbot grade` will name what is wrong
            continue
        if new != doc:
            db.execute("UPDATE verdicts SET results=? WHERE job_id=?",
                       (json.dumps(new, sort_keys=True), job_id))
            changed += 1
    return f"{changed} results document(s) upgraded, {unreadable} left as stored"


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "baseline", _baseline),
    Migration(2, "history index", _history_index),
    Migration(3, "operations tables", _operations_tables),
    Migration(4, "upgrade stored results", _upgrade_stored_results),
)
LATEST = MIGRATIONS[-1].version


def current_version(path: Path) -> int:
    db = sqlite3.connect(Path(path), timeout=30)
    try:
        db.execute(_VERSIONS)
        return int(db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
                   .fetchone()[0])
    finally:
        db.close()


def pending(path: Path) -> list[Migration]:
    version = current_version(path)
    if version > LATEST:
        raise EvalbotError(f"{path}: the store is at schema version {version}, this evalbot "
                           f"knows up to {LATEST}: upgrade evalbot before running it")
    return [m for m in MIGRATIONS if m.version > version]


def migrate(path: Path, backup_dir: Path | None = None) -> list[str]:
    """Apply every pending migration in order; returns one line per migration applied.

    A missing store is created (a new installation starts at the latest version); an existing
    one is backed up first."""
    path = Path(path)
    fresh = not path.is_file()
    Store(path).close()  # the store's own tables, as the running service would create them
    todo = pending(path)
    if not todo:
        return []
    lines = [f"created {path}"] if fresh else []
    if not fresh:
        target = (backup_dir or path.parent) / f"{path.name}.pre-v{todo[-1].version}." \
                                              f"{time.strftime('%Y%m%dT%H%M%S')}.bak"
        lines.append(f"backup: {backup(path, target)}")
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        for m in todo:
            db.execute("BEGIN IMMEDIATE")
            try:
                note = m.apply(db)
                db.execute("INSERT INTO schema_migrations VALUES (?,?,?)",
                           (m.version, m.name, time.time()))
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            lines.append(f"v{m.version} {m.name}: {note}")
    finally:
        db.close()
    return lines


def backup(src: Path, dest: Path) -> Path:
    """A consistent copy of a live store (sqlite3 online backup), checked, then renamed in."""
    src, dest = Path(src), Path(dest)
    if not src.is_file():
        raise EvalbotError(f"{src}: no such store")
    if dest.exists() and dest.resolve() == src.resolve():
        raise EvalbotError(f"{dest}: the backup must not overwrite the store itself")
    if dest.exists():
        raise EvalbotError(f"{dest}: exists already; choose a new file for the backup")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30)
    target = sqlite3.connect(tmp)
    try:
        source.backup(target, pages=1024)  # in steps: writers are not blocked for long
        check = target.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise EvalbotError(f"{dest}: the backup failed its integrity check: {check}")
    finally:
        target.close()
        source.close()
    tmp.replace(dest)
    return dest
