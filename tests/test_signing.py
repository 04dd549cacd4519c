"""Signed verdicts: real verdicts (stub engine -> harness -> grading) signed with Ed25519 and
checked by the real `evalbot verify` command line against published key files."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.audit.signing import (
    SignatureError,
    SigningKey,
    canonical_bytes,
    key_id,
    load_public_keys,
    load_signing_key,
    public_line,
    sign_verdict,
    verify_verdict,
)
from evalbot.audit.signing_cli import keys_group
from tests.graded_history import measure
from tests.stub_engine import make_repo


@pytest.fixture(scope="module")
def verdict(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("signing")
    repo, main, shas = make_repo(root, {"faster": {"decode": 1300.0, "prefill": 1.3e6}})
    # a non-ASCII model name: the encoding is UTF-8, not \\u escapes
    _, graded = measure(repo, main, shas["faster"], root / "job", model="Qwythos‑9B·q4")
    assert graded["kind"] == "improved"
    return graded


def _key() -> SigningKey:
    private = Ed25519PrivateKey.generate()
    return SigningKey(key_id(private.public_key()), private)


def _publish(keys_dir: Path, *keys: SigningKey) -> Path:
    keys_dir.mkdir(exist_ok=True)
    for k in keys:
        (keys_dir / f"evalbot-{k.key_id}.pub").write_text(public_line(k.private.public_key()) + "\n")
    return keys_dir


def _verify_cli(path: Path, keys_dir: Path) -> subprocess.CompletedProcess[str]:
    """The installed command line, exit codes and messages as a user sees them."""
    return subprocess.run([sys.executable, "-m", "evalbot", "verify", str(path), "--keys",
                           str(keys_dir)], capture_output=True, text=True, timeout=60, check=False)


def test_cli_accepts_a_signed_verdict_and_rejects_an_edited_one(verdict, tmp_path):
    key = _key()
    keys_dir = _publish(tmp_path / "keys", key)
    signed = sign_verdict(verdict, key)
    good = tmp_path / "verdict.json"
    good.write_text(json.dumps(signed, indent=2))  # any formatting: the canonical form is signed
    done = _verify_cli(good, keys_dir)
    assert done.returncode == 0 and f"ok, signed by key {key.key_id}" in done.stdout
    edited = copy.deepcopy(signed)
    edited["cells"][0]["speedup"] += 0.01
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(edited))
    done = _verify_cli(bad, keys_dir)
    assert done.returncode == 1
    assert f"edited.json: bad signature for key {key.key_id}" in done.stderr


@pytest.mark.parametrize(("edit", "message"), [
    (lambda v: v.pop("signature"), "missing signature"),
    (lambda v: v["signature"].update(key_id="0123456789abcdef"), "unknown key id '0123456789abcdef'"),
    (lambda v: v.update(headline="eval:REJECT"), "bad signature"),
    (lambda v: v["signature"].update(value="AAAA"), "bad signature"),
    (lambda v: v["signature"].update(alg="rsa"), "unsupported signature"),
    (lambda v: v.update(signature="yes"), "malformed signature"),
])
def test_each_problem_is_named(verdict, edit, message):
    key = _key()
    signed = sign_verdict(verdict, key)
    edit(signed)
    with pytest.raises(SignatureError, match=message):
        verify_verdict(signed, {key.key_id: key.private.public_key()})


def test_exactly_the_canonical_utf8_json_without_the_signature_is_signed(verdict):
    key = _key()
    signed = sign_verdict(verdict, key)
    assert "signature" not in verdict  # sign_verdict returns a copy
    expected = json.dumps(verdict, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")
    assert canonical_bytes(signed) == expected and "Qwythos‑9B·q4".encode() in expected
    # checked with the library directly, not through our verifier
    key.private.public_key().verify(base64.b64decode(signed["signature"]["value"]), expected)
    resigned = sign_verdict(signed, key)  # re-signing replaces the signature, signs the same
    assert canonical_bytes(resigned) == expected


def test_keys_rotate_old_verdicts_still_verify(verdict):
    old, new = _key(), _key()
    keys = {old.key_id: old.private.public_key(), new.key_id: new.private.public_key()}
    assert verify_verdict(sign_verdict(verdict, old), keys) == old.key_id
    assert verify_verdict(sign_verdict(verdict, new), keys) == new.key_id
    assert old.key_id != new.key_id and len(old.key_id) == 16


def test_a_key_file_whose_id_does_not_match_its_key_is_refused(tmp_path):
    key, other = _key(), _key()
    line = public_line(key.private.public_key()).replace(key.key_id, other.key_id)
    (tmp_path / "evalbot-x.pub").write_text(line)
    with pytest.raises(SignatureError, match=f"key id {other.key_id} does not match its key"):
        load_public_keys(tmp_path)
    with pytest.raises(SignatureError, match="no such key directory"):
        load_public_keys(tmp_path / "absent")


def test_generate_writes_a_private_key_0600_and_prints_the_line_to_publish(verdict, tmp_path,
                                                                            monkeypatch):
    out = tmp_path / "signing.pem"
    done = CliRunner().invoke(keys_group, ["generate", "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert os.stat(out).st_mode & 0o777 == 0o600
    line = done.stdout.splitlines()[0]
    kid = line.split()[1]
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / f"evalbot-{kid}.pub").write_text(line + "\n")
    monkeypatch.setenv("EVALBOT_SIGNING_KEY_FILE", str(out))
    key = load_signing_key()  # from the environment variable
    assert key.key_id == kid
    assert verify_verdict(sign_verdict(verdict, key), load_public_keys(tmp_path / "keys")) == kid
    again = CliRunner().invoke(keys_group, ["generate", "--out", str(out)])
    assert again.exit_code != 0 and "refusing to overwrite" in str(again.exception)


def test_a_signing_key_others_can_read_or_a_missing_setting_is_refused(tmp_path, monkeypatch):
    out = tmp_path / "k.pem"
    CliRunner().invoke(keys_group, ["generate", "--out", str(out)])
    out.chmod(0o644)
    with pytest.raises(SignatureError, match="readable by others"):
        load_signing_key(out)
    monkeypatch.delenv("EVALBOT_SIGNING_KEY_FILE", raising=False)
    with pytest.raises(SignatureError, match="set EVALBOT_SIGNING_KEY_FILE"):
        load_signing_key()


def test_nan_cannot_be_signed(verdict):
    broken = {**verdict, "reasons": [float("nan")]}
    with pytest.raises(SignatureError, match="cannot be encoded canonically"):
        sign_verdict(broken, _key())
