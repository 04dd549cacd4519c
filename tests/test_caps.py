"""What a run holds on disk, as the disk cap counts it (engine/sandbox/caps.py): a hostile run's
tricks neither inflate nor hide it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.engine.sandbox.caps import MB, DiskWatch, usage


def test_links_sparse_files_and_symlinks_count_what_they_hold(tmp_path: Path) -> None:
    place = tmp_path / "tree"
    place.mkdir()
    (place / "data").write_bytes(os.urandom(2 * MB))
    for i in range(5):  # five more names for the same 2 MB: held once
        os.link(place / "data", place / f"link-{i}")
    with open(place / "sparse", "wb") as f:  # 1 GB long, nothing written: holds nothing
        f.truncate(1 << 30)
    (place / "outside").symlink_to(tmp_path.parent)  # never followed
    held, complete = usage((place,))
    assert complete and 2 * MB <= held < 3 * MB, held


@pytest.fixture
def own_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system of the test's own (a box's workdir is its own: docs/box.md)."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(tmp_path)],
                   check=True)
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "--lazy", str(tmp_path)], check=True)


def test_a_run_past_its_cap_is_named_and_one_within_it_is_not(own_disk: Path) -> None:
    place, other = own_disk / "out", own_disk / "other"
    place.mkdir()
    other.mkdir()
    watch = DiskWatch(own_disk, (place,), cap_mb=1)
    (place / "small").write_bytes(os.urandom(MB // 2))
    (other / "neighbour").write_bytes(os.urandom(4 * MB))  # the disk grew: not by this run
    assert watch.at_end() == ""
    (place / "large").write_bytes(os.urandom(2 * MB))
    assert watch.at_end() == "wrote more than its disk cap of 1 MB"
