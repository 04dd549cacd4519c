"""`evalbot verify` and `evalbot keys generate`: the command-line side of evalbot.audit.signing.

The published keys a verifier trusts by default are those shipped in the package (keys/ of the
checkout the wheel was built from) and those in the user's own key folder (USER_KEYS_DIR): an
installed wheel is no place to write, so a wheel user publishes a key, or adds an operator's,
there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evalbot.audit.signing import (
    KEY_ENV,
    KEYS_DIR,
    SignatureError,
    generate_key,
    load_public_keys,
    public_line,
    verify_verdict,
)

USER_KEYS_DIR = Path(click.get_app_dir("evalbot")) / "keys"  # ~/.config/evalbot/keys on Linux


def default_public_keys() -> dict[str, Ed25519PublicKey]:
    """The packaged keys and the user's; a key folder that is absent holds no key."""
    keys: dict[str, Ed25519PublicKey] = {}
    for directory in (KEYS_DIR, USER_KEYS_DIR):
        if directory.is_dir():
            keys.update(load_public_keys(directory))
    if not keys:
        raise SignatureError(f"no published public keys: none shipped in {KEYS_DIR} and none in "
                             f"{USER_KEYS_DIR}; put the bot's evalbot-<key_id>.pub there, or "
                             "pass --keys DIR (a folder of *.pub files, e.g. a checkout's keys/)")
    return keys


def read_verdict(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SignatureError(f"{path}: not JSON: {exc}") from exc


@click.command()
@click.argument("verdict_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--keys", "keys_dir", type=click.Path(path_type=Path), default=None,
              help=f"directory of published public keys (*.pub); default: those shipped with "
                   f"evalbot and those in {USER_KEYS_DIR}")
def verify(verdict_files: tuple[Path, ...], keys_dir: Path | None) -> None:
    """Check verdict JSON files against the published public keys; exit 1 on the first bad one."""
    keys = default_public_keys() if keys_dir is None else load_public_keys(keys_dir)
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
    """Create a signing key; prints the public key line to publish."""
    key = generate_key(out)
    line = public_line(key.private.public_key())
    pub = f"evalbot-{key.key_id}.pub"
    click.echo(line)
    # Folders that exist for whoever runs this: their own key folder (an installed wheel has no
    # keys/ to write), and the repository a release is built from.
    click.echo(f"# publish it for this machine's `evalbot verify`:\n"
               f"#   mkdir -p {USER_KEYS_DIR} && echo '{line}' > {USER_KEYS_DIR / pub}\n"
               f"# and for everyone: commit it as keys/{pub} in the evalbot checkout your releases "
               f"are built from (or publish the line where verifiers fetch it: --keys DIR)",
               err=True)
    click.echo(f"# sign with it: export {KEY_ENV}={out.resolve()}", err=True)
