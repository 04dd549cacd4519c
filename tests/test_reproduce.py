"""`evalbot reproduce`: the printed script names the measurement exactly, and its commands run."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.audit.reproduce import reproduce, reproduction
from evalbot.audit.signing import SigningKey, key_id, public_line, sign_verdict
from evalbot.config.errors import EvalbotError
from evalbot.engine import __version__ as HARNESS_VERSION
from tests.graded_history import measure
from tests.stub_engine import make_repo


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path, str, str]:
    root = tmp_path_factory.mktemp("reproduce")
    repo, main, shas = make_repo(root, {"faster": {"decode": 1300.0, "prefill": 1.3e6}})
    models = root / "models"
    models.mkdir()
    (models / "tiny.gguf").write_bytes(b"tiny model weights")
    _, verdict = measure(repo, main, shas["faster"], root / "job",
                         model_file=models / "tiny.gguf")
    return verdict, repo, models, main, shas["faster"]


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalbot", "reproduce", str(path), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def _prefix(script: str) -> str:
    """Steps 1 and 2 (commits, models): what can run here without the measured profile."""
    return script.split("# 3.")[0]


def _bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, **env})


def test_prints_the_measurement_and_its_commands_run(measured, tmp_path):
    verdict, repo, models, base, head = measured
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(verdict))
    done = _cli(path)
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert script.startswith("#!/usr/bin/env bash\n")
    assert (f"evalbot eval --repo \"$ENGINE_REPO\" --base {base} --head {head} --profile stub "
            f"--policy default --models-dir \"$MODELS_DIR\" --out reproduce-{head[:10]} --dry-run"
            in script)
    assert f"evalbot grade reproduce-{head[:10]}/private/results.json --policy default" in script
    assert f"measured by harness {HARNESS_VERSION}" in script and "# not signed" in script
    assert "correctness seed none (not scored)" in script and "looks [3, 5]" in script
    assert _bash(script, tmp_path, ENGINE_REPO=str(repo), MODELS_DIR="").returncode != 0
    ran = _bash(_prefix(script), tmp_path, ENGINE_REPO=str(repo), MODELS_DIR=str(models))
    assert ran.returncode == 0, ran.stderr
    assert "tiny.gguf: OK" in ran.stdout
    (models / "tiny.gguf").write_bytes(b"other weights")
    try:
        ran = _bash(_prefix(script), tmp_path, ENGINE_REPO=str(repo), MODELS_DIR=str(models))
        assert ran.returncode != 0 and "tiny.gguf: FAILED" in ran.stdout
    finally:
        (models / "tiny.gguf").write_bytes(b"tiny model weights")


def test_seed_and_an_older_harness_are_carried(measured):
    verdict = copy.deepcopy(measured[0])
    verdict["provenance"].update(seed=1234, harness_version="0.0.9")
    script = reproduction(verdict, repo="/src/engine")
    assert "--seed 1234" in script and "--repo /src/engine" in script
    assert "pip install 'evalbot==0.0.9'" in script


def test_planted_text_cannot_become_a_command(measured, tmp_path):
    verdict = copy.deepcopy(measured[0])
    verdict["headline"] = "eval:XL\ntouch PWNED"
    verdict["provenance"]["models"][0]["name"] = "m\r\ntouch PWNED2"
    script = reproduction(verdict)
    assert not any(line.startswith("touch") for line in script.splitlines())
    _bash(_prefix(script), tmp_path, ENGINE_REPO=str(measured[1]), MODELS_DIR=str(measured[2]))
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "PWNED2").exists()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("base_sha", "main", "base_sha 'main' is not a full 40-hex SHA"),
    ("head_sha", "$(reboot)", "head_sha '\\$\\(reboot\\)' is not a full 40-hex SHA"),
    ("profile", "stub; rm -rf /", "profile 'stub; rm -rf /' is not a plain name"),
    ("policy", "default", "policy 'default' is not NAME@VERSION"),
])
def test_bad_provenance_is_refused_by_name(measured, field, value, message):
    verdict = copy.deepcopy(measured[0])
    verdict["provenance"][field] = value
    with pytest.raises(EvalbotError, match=message):
        reproduction(verdict)


def test_the_signature_state_is_reported(measured, tmp_path):
    private = Ed25519PrivateKey.generate()
    key = SigningKey(key_id(private.public_key()), private)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / f"evalbot-{key.key_id}.pub").write_text(public_line(private.public_key()))
    signed = sign_verdict(measured[0], key)
    path = tmp_path / "signed.json"
    path.write_text(json.dumps(signed))
    runner = CliRunner()
    done = runner.invoke(reproduce, [str(path), "--keys", str(keys)])
    assert f"# signature ok (key {key.key_id})" in done.stdout
    signed["kind"] = "neutral"
    path.write_text(json.dumps(signed))
    done = runner.invoke(reproduce, [str(path), "--keys", str(keys)])
    assert "# SIGNATURE DOES NOT VERIFY: bad signature" in done.stdout


def test_a_file_that_is_not_a_verdict_is_named(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text("[1, 2]")
    done = _cli(path)  # the installed command line: exit 1 and one line on stderr
    assert done.returncode == 1 and "not a verdict" in done.stderr
    path.write_text("{")
    done = CliRunner().invoke(reproduce, [str(path)])
    assert done.exit_code != 0 and "notes.json: not JSON" in str(done.exception)
