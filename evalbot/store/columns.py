"""Columns added to a table after its first release: one migration step shared by every table."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable


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
