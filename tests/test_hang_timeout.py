"""A hung test fails by name and the session goes on (pyproject.toml's pytest-timeout settings).

The suite's own configuration (xdist workers, the timeout method) runs a module with a test
that never returns beside one that passes; only the timeout is shortened from its 600 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HANGING = '''
import threading


def test_waits_for_an_event_nobody_sets():
    threading.Event().wait()


def test_beside_it_passes():
    assert True
'''


def test_a_hung_test_fails_by_name_and_the_others_still_run(tmp_path: Path) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGING)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
         str(tmp_path), "-p", "no:cacheprovider", "-n", "2", "--timeout", "3", "-rA",
         str(tmp_path / "test_hangs.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "FAILED test_hangs.py::test_waits_for_an_event_nobody_sets" in out, out
    assert "Timeout" in out, out
    assert "PASSED test_hangs.py::test_beside_it_passes" in out, out
    assert "1 failed, 1 passed" in out, out
