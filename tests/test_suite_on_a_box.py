"""The suite on a machine where `evalbot box init` ran: one clear refusal (tests/conftest.py),
not every sandboxed test failing on the launcher's "not the sandbox user named in ...". The box
is made in a private mount namespace: this machine's /etc/evalbot stays as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from evalbot.engine.sandbox.sandbox_exec import ALLOWED_USER_FILE

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_refuses_a_machine_where_box_init_ran(tmp_path: Path) -> None:
    etc = Path(ALLOWED_USER_FILE).parent
    etc.mkdir(parents=True, exist_ok=True)  # the mount point (the setup guide's test makes it too)
    private = tmp_path / "etc-evalbot"
    private.mkdir()
    (private / "sandbox-user").write_text("box-sandbox\n")
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c",
         f'mount --bind "{private}" "{etc}" && exec "$@"', "box",
         sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "tests/test_bench_short.py::test_every_bench_is_run_somewhere"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 4, out[-3000:]
    assert "this machine is an evalbot box" in out and "'box-sandbox'" in out, out[-3000:]
    assert "Undoing box init" in out and "passed" not in out
    assert not Path(ALLOWED_USER_FILE).exists() or \
        Path(ALLOWED_USER_FILE).read_text() != "box-sandbox\n"  # the namespace's, not the machine's
