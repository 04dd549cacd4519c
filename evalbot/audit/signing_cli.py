"""`evalbot verify` and `evalbot keys generate`: the command-line side of evalbot.audit.signing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from evalbot.audit.signing import (
    KEY_ENV,
    KEYS_DIR,
    SignatureError,
    generate_key,
    load_public_keys,
    public_line,
    verify_verdict,
)


def read_verdict(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SignatureError(f"{path}: not JSON: {exc}") from exc


@click.command()
@click.argument("verdict_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--keys", "keys_dir", type=click.Path(path_type=Path), default=KEYS_DIR,
              show_default=True, help="directory of published public keys (*.pub)")
def verify(verdict_files: tuple[Path, ...], keys_dir: Path) -> None:
    """Check verdict JSON files against the published public keys; exit 1 on the first bad one."""
    keys = load_public_keys(keys_dir)
    for path in verdict_files:
        try:
            kid = verify_verdict(read_verdict(path), keys)
        except SignatureError as exc:
            raise SignatureError(f"{path}: {exc}") from exc
        click.echo(f"{path}: ok, signed by key {kid}")


@click.group("keys")
def keys_group() -> None:
    """Manage the verdict signing key."""


@keys_group.command("generate")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="private key file to create (mode 0600; never overwritten)")
def generate(out: Path) -> None:
    """Create a signing key; prints the public key line to publish in keys/."""
    key = generate_key(out)
    line = public_line(key.private.public_key())
    click.echo(line)
    click.echo(f"# publish it:  echo '{line}' > keys/evalbot-{key.key_id}.pub", err=True)
    click.echo(f"# sign with it: export {KEY_ENV}={out.resolve()}", err=True)
