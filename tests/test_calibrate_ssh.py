"""`evalbot calibrate --config` on an SSH box: the A/A runs on the box the config names (a real
sshd, the sandbox on), and its noise lands in the config's store under that box's name."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalbot.store.noise import NoiseStore
from tests.sshd import SANDBOX_USER, Sshd, ensure_sandbox_user, system_python
from tests.stub_engine import make_repo

PROFILE = """
name: stubcal
gpu: false
build: {argv: ["PY", "build.py"], artifacts: [build/engine.py, build/speed.json]}
models:
  - {name: m, file: m.bin, sha256: PIN, role: primary, namespace: eval-m}
speed:
  looks: [3, 5]
  sd_floor: 0.01
  runs:
    - model: m
      argv: ["PY", "{build}/build/engine.py", "--ctxs", "{ctxs}"]
      parse: {kind: json_line, prefix: "BENCH_JSON ", fields: {decode: "{ctx}.decode_tps"}}
      decode_tokens: 32   # what the stub really decodes: its rates then fit its wall time
      cells: [{metric: decode, ctx: 128}]
"""


@pytest.fixture
def box_root() -> Iterator[Path]:
    ensure_sandbox_user()
    with tempfile.TemporaryDirectory(prefix="evalbot-cal-") as tmp:
        os.chmod(tmp, 0o755)  # the sandbox user reads the model and traverses to its job dir
        yield Path(tmp)


def test_calibrate_an_ssh_box_from_the_config(sshd: Sshd, box_root: Path, tmp_path: Path) -> None:
    repo, main, _ = make_repo(box_root / "src", {}, main={"work_s": 0.02})
    models = box_root / "models"
    models.mkdir()
    (models / "m.bin").write_bytes(b"weights" * 1000)
    (models / "m.bin").chmod(0o644)
    profile = tmp_path / "stubcal.yaml"
    profile.write_text(PROFILE.replace("PY", system_python()).replace(
        "PIN", hashlib.sha256(b"weights" * 1000).hexdigest()))
    workdir = box_root / "box"
    workdir.mkdir(mode=0o711)
    config = tmp_path / "evalbot.yaml"
    config.write_text(yaml.safe_dump({
        "profile": str(profile), "store": str(tmp_path / "evalbot.sqlite3"),
        "boxes": [{"name": "gpu1", "kind": "ssh", **sshd.box_kwargs(), "workdir": str(workdir),
                   "repo": str(repo), "models_dir": str(models), "python": sys.executable,
                   "sandbox_user": SANDBOX_USER,
                   "sandbox_launcher": []}]}))  # the test's harness runs as root: no sudo
    done = subprocess.run([sys.executable, "-m", "evalbot", "calibrate", "--config", str(config),
                           "--sha", main, "--pairs", "6", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    results = tmp_path / "out" / "results.json"
    assert done.returncode == 0 or "A/A not neutral" in done.stderr, \
        output + (results.read_text()[-3000:] if results.exists() else "")
    store = NoiseStore(tmp_path / "evalbot.sqlite3")
    floors = store.floors("gpu1", "stubcal")
    store.close()
    assert list(floors) and all(0 < sd < 1 for sd in floors.values()), output
    assert len(list((workdir / "jobs").iterdir())) == 1  # it ran in the SSH box's workdir
    # it said what it was doing while it measured: its steps and each pair, in order
    said = re.findall(r"^calibrate: (building main|measuring \S+: \d/6 pairs)", done.stderr,
                      re.M)
    # (a quick build may end between two looks at the box's status: then no "building" line)
    pairs = [int(m.split(": ")[1].split("/")[0]) for m in said if "pairs" in m]
    assert pairs and "pairs" in said[-1], done.stderr
    assert "building main" not in said[1:], done.stderr
    assert "127.0.0.1" not in output
    assert not re.search(rf"(?<![\d.]){sshd.port}(?![\d.])", output)
