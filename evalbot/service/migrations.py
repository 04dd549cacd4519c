"""`evalbot migrate` and `evalbot backup` (the store's migrations: evalbot/store/migrations.py),
and the reader of results files of any version this evalbot can upgrade."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from evalbot.config.errors import EvalbotError
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.results import upgrade, validate
from evalbot.store.migrations import backup, current_version, migrate, pending


def read_results(path: Path) -> dict[str, Any]:
    """A results file of any version this evalbot can upgrade, validated."""
    try:
        doc = json.loads(Path(path).read_text())
        return validate(upgrade(doc))
    except (OSError, ValueError) as exc:
        raise EvalbotError(f"{path}: not a readable results file: {exc}") from exc
    except ContractError as exc:
        raise EvalbotError(f"{path}: {exc}") from exc


# ---- CLI ---------------------------------------------------------------------------------------
STORE = click.option("--store", "store_path", type=click.Path(path_type=Path), required=True,
                     help="the bot's SQLite store file")


@click.command("backup")
@STORE
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="the backup file to write (must not exist)")
def backup_cmd(store_path: Path, out: Path) -> None:
    """Copy the store while the service runs (SQLite online backup), integrity-checked."""
    click.echo(f"backed up {store_path} to {backup(store_path, out)}")


@click.command("migrate")
@STORE
@click.option("--check", is_flag=True, help="only list pending migrations; exit 1 if any")
def migrate_cmd(store_path: Path, check: bool) -> None:
    """Bring the store's schema up to this evalbot's version (backup first)."""
    if check:
        if not store_path.is_file():
            raise EvalbotError(f"{store_path}: no such store")
        todo = pending(store_path)
        for m in todo:
            click.echo(f"pending: v{m.version} {m.name}")
        if todo:
            raise EvalbotError(f"{len(todo)} migration(s) pending: run `evalbot migrate`")
        click.echo(f"store at schema version {current_version(store_path)} (latest)")
        return
    lines = migrate(store_path)
    for line in lines:
        click.echo(line)
    click.echo(f"store at schema version {current_version(store_path)}"
               + ("" if lines else " (nothing to do)"))
