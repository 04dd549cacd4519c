"""Which store errors may pass: the store locked by another writer, its disk full, an I/O error.

Each of these is the store's condition, not one delivery's or one job's: whoever meets one keeps
what it was doing for later (the delivery stays in the inbox, the job stays unpublished) and
holds back a while (evalbot.github.hold), since everything else would meet it too; once the lock
is let go or the disk freed, the work goes on. Any other SQLite error (a missing table, a
constraint, a corrupt file) is a bug or damage and is treated as such by the caller.
"""

from __future__ import annotations

import sqlite3

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
