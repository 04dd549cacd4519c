"""Signed verdicts: Ed25519 over a canonical JSON encoding, with a key id so keys can rotate.

What is signed, exactly: the verdict object with its top-level "signature" member removed,
encoded as `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)` and then UTF-8 (keys sorted by code point at every level, no whitespace,
non-ASCII characters as themselves, numbers as Python writes them: integers plainly, floats in
their shortest round-trip form). The verifier parses the file and re-encodes it the same way, so
formatting of the file (indentation, key order) does not matter; every value does.

The signature member: {"alg": "ed25519", "encoding": "evalbot-canonical-json/1",
"key_id": <16 hex: the first 8 bytes of sha256 of the raw 32-byte public key>,
"value": <base64 of the 64-byte signature>}.

Published public keys live in the repo's keys/ directory, one file per key named
`evalbot-<key_id>.pub`, holding one line: `ed25519 <key_id> <base64 raw public key> [comment]`.
The private key is a secret: a PKCS#8 PEM file (mode 0600) named by $EVALBOT_SIGNING_KEY_FILE.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from evalbot.config.errors import EvalbotError
from evalbot.config.resources import KEYS_DIR as PUBLISHED_KEYS

ALG = "ed25519"
ENCODING = "evalbot-canonical-json/1"
KEY_ENV = "EVALBOT_SIGNING_KEY_FILE"
KEYS_DIR = PUBLISHED_KEYS


class SignatureError(EvalbotError):
    """A verdict failed verification, or a key file is unusable; the message names the problem."""


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    private: Ed25519PrivateKey


def canonical_bytes(verdict: dict[str, Any]) -> bytes:
    """The exact bytes that are signed: the verdict less its signature, canonically encoded."""
    unsigned = {k: v for k, v in verdict.items() if k != "signature"}
    try:
        text = json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except ValueError as exc:  # NaN or infinity has no JSON form that every reader agrees on
        raise SignatureError(f"verdict cannot be encoded canonically: {exc}") from exc
    return text.encode("utf-8")


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(_raw(public)).hexdigest()[:16]


def public_line(public: Ed25519PublicKey, comment: str = "evalbot verdict signing key") -> str:
    """The line to publish as keys/evalbot-<key_id>.pub."""
    b64 = base64.b64encode(_raw(public)).decode("ascii")
    return f"{ALG} {key_id(public)} {b64} {comment}".rstrip()


def sign_verdict(verdict: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """A copy of the verdict with a "signature" member (an existing one is replaced)."""
    value = key.private.sign(canonical_bytes(verdict))
    signature = {"alg": ALG, "encoding": ENCODING, "key_id": key.key_id,
                 "value": base64.b64encode(value).decode("ascii")}
    return {**{k: v for k, v in verdict.items() if k != "signature"}, "signature": signature}


def verify_verdict(verdict: Any, keys: dict[str, Ed25519PublicKey]) -> str:
    """Check the signature against the published keys; returns the key id or raises."""
    if not isinstance(verdict, dict):
        raise SignatureError("not a verdict: the file's JSON is not an object")
    sig = verdict.get("signature")
    if sig is None:
        raise SignatureError("missing signature: the verdict has no \"signature\" member")
    if not isinstance(sig, dict) or not all(isinstance(sig.get(k), str)
                                            for k in ("alg", "key_id", "value")):
        raise SignatureError("malformed signature: needs string alg, key_id and value")
    if sig["alg"] != ALG or sig.get("encoding", ENCODING) != ENCODING:
        raise SignatureError(f"unsupported signature: alg {sig['alg']!r}, encoding "
                             f"{sig.get('encoding')!r} (this verifier knows {ALG}, {ENCODING})")
    public = keys.get(sig["key_id"])
    if public is None:
        known = ", ".join(sorted(keys)) or "none"
        raise SignatureError(f"unknown key id {sig['key_id']!r}: no published key has it "
                             f"(known: {known})")
    try:
        value = base64.b64decode(sig["value"], validate=True)
        public.verify(value, canonical_bytes(verdict))
    except (InvalidSignature, binascii.Error, ValueError) as exc:
        raise SignatureError(f"bad signature for key {sig['key_id']}: the verdict was changed "
                             f"after it was signed (or the signature was)") from exc
    return str(sig["key_id"])


def load_public_keys(directory: Path = KEYS_DIR) -> dict[str, Ed25519PublicKey]:
    """Every keys/*.pub file, by key id; a file whose id does not match its key is refused."""
    if not directory.is_dir():
        raise SignatureError(f"{directory}: no such key directory")
    keys: dict[str, Ed25519PublicKey] = {}
    for path in sorted(directory.glob("*.pub")):
        public, kid = _parse_public(path)
        keys[kid] = public
    return keys


def _parse_public(path: Path) -> tuple[Ed25519PublicKey, str]:
    parts = path.read_text(encoding="utf-8").split(maxsplit=3)
    if len(parts) < 3 or parts[0] != ALG:
        raise SignatureError(f"{path}: expected `{ALG} <key_id> <base64 public key> [comment]`")
    try:
        public = Ed25519PublicKey.from_public_bytes(base64.b64decode(parts[2], validate=True))
    except (binascii.Error, ValueError) as exc:
        raise SignatureError(f"{path}: the public key is not 32 bytes of base64: {exc}") from exc
    if key_id(public) != parts[1]:
        raise SignatureError(f"{path}: key id {parts[1]} does not match its key "
                             f"(which has id {key_id(public)})")
    return public, parts[1]


def generate_key(out: Path) -> SigningKey:
    """Write a new private key to `out` (created 0600, never overwritten)."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise SignatureError(f"{out}: already exists; refusing to overwrite a key") from exc
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return SigningKey(key_id(private.public_key()), private)


def load_signing_key(path: Path | None = None) -> SigningKey:
    """The private key from `path`, else from the file named by $EVALBOT_SIGNING_KEY_FILE."""
    if path is None:
        named = os.environ.get(KEY_ENV, "")
        if not named:
            raise SignatureError(f"no signing key: set {KEY_ENV} to the private key file")
        path = Path(named)
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read the signing key: {exc.strerror}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):  # like ssh: a key others can read is not secret
        raise SignatureError(f"{path}: signing key is readable by others (mode "
                             f"{stat.S_IMODE(mode):o}); chmod 600 it")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"{path}: not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise SignatureError(f"{path}: not an Ed25519 key")
    return SigningKey(key_id(private.public_key()), private)


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
