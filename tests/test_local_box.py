"""The local box: argv without a shell, timeouts, files, detached runs."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from evalbot.remote.box import BoxError
from evalbot.remote.local import LocalBox


@pytest.fixture
def box(tmp_path: Path) -> LocalBox:
    return LocalBox("local", str(tmp_path / "box"))


def test_arguments_arrive_literally(box: LocalBox) -> None:
    hostile = "a b; echo pwned $(id) `id` 'q' \"d\""
    out = box.run([sys.executable, "-c", "import sys; print(sys.argv[1])", hostile], timeout_s=30)
    assert out.returncode == 0 and out.output.strip() == hostile


def test_streamed_output_and_return_code(box: LocalBox) -> None:
    seen: list[str] = []
    out = box.run([sys.executable, "-c", "print('one'); print('two'); raise SystemExit(4)"],
                  timeout_s=30, on_output=seen.append)
    assert seen == ["one", "two"] and out.returncode == 4


def test_timeout_raises_box_error(box: LocalBox) -> None:
    with pytest.raises(BoxError, match="timed out"):
        box.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)


def test_put_and_get_round_trip(box: LocalBox, tmp_path: Path) -> None:
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("hello")
    box.put(src, f"{box.workdir}/copy")
    box.get(f"{box.workdir}/copy/sub/f.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_text() == "hello"
    with pytest.raises(BoxError, match="no such file"):
        box.get(f"{box.workdir}/absent", tmp_path / "x")


def test_detached_run_writes_its_log_and_ends(box: LocalBox) -> None:
    jobdir = f"{box.workdir}/jobs/j1"
    run = box.start_detached([sys.executable, "-c", "print('detached ok')"], jobdir=jobdir)
    for _ in range(200):
        if not box.is_running(run):
            break
        time.sleep(0.05)
    assert not box.is_running(run)
    assert "detached ok" in (Path(jobdir) / "harness.log").read_text()
