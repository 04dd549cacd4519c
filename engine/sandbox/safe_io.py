"""File I/O of the harness that a sandboxed process cannot redirect.

The sandbox may create, replace or link anything in the directories it can write. The harness
therefore never opens a path there by name: it makes each run's directories itself (random names,
inside a directory only the harness writes), creates files with O_EXCL | O_NOFOLLOW, and opens
what the PR side wrote with O_NOFOLLOW on every path component, as a regular file with one link,
under a size cap. Anything else is `Untrusted`: the PR side's malformed output, never a crash of
ours. Caches the harness alone writes are read only when their sha256 matches the manifest kept
next to them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
MANIFEST = "manifest.json"


class Untrusted(ValueError):
    """What the PR side left is not a plain, small, regular file: treated as malformed."""


def private_dir(parent: Path, prefix: str) -> Path:
    """A fresh directory (random name, created exclusively) only the harness can enter."""
    harness_dir(parent)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def shared_dir(parent: Path, prefix: str, gid: int) -> Path:
    """A fresh directory the sandbox group may write (setgid, so its files stay in the group)."""
    path = private_dir(parent, prefix)
    os.chown(path, -1, gid)
    os.chmod(path, 0o2770)
    return path


def harness_dir(path: Path, mode: int = 0o711) -> Path:
    """Make `path` (a directory of the harness's own, no link) or check the one that is there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise Untrusted(f"{path} is not a directory only the harness writes")
    os.chmod(path, mode)
    return path


def write_new(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """Create `path` exclusively (never through a link, never over a file) and write `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def write_replace(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Atomically replace `path` in a harness-only directory: an exclusive temporary, renamed."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_beneath(root: Path, rel: str | Path, cap: int) -> bytes:
    """Read root/rel without following any link below `root`: a regular file, one link, at
    most `cap` bytes (FIFOs, devices, links and oversized files are `Untrusted`)."""
    with _open_beneath(root, rel, cap) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise Untrusted(f"{rel}: over the {cap}-byte cap")
    return data


def _open_beneath(root: Path, rel: str | Path, cap: int) -> BinaryIO:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise Untrusted(f"{rel}: not a plain relative path")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise Untrusted(f"{rel}: {part} is not a directory ({exc.strerror})") from exc
            os.close(fd)
            fd = nxt
        try:
            file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            why = "a link" if exc.errno == errno.ELOOP else exc.strerror
            raise Untrusted(f"{rel}: cannot open ({why})") from exc
    finally:
        os.close(fd)
    f = os.fdopen(file_fd, "rb")
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > cap:
        f.close()
        raise Untrusted(f"{rel}: not a regular file with a single link of at most {cap} bytes")
    return f


def read(path: Path, cap: int) -> bytes:
    return read_beneath(path.parent, path.name, cap)


def read_json(path: Path, cap: int) -> Any:
    data = read(path, cap)
    try:
        return json.loads(data)
    except ValueError as exc:
        raise Untrusted(f"{path.name}: not JSON ({exc})") from exc


def copy_beneath(root: Path, rel: str, dest: Path, cap: int) -> None:
    """Copy root/rel (opened as `read_beneath` does) to a new file `dest` of the harness."""
    with _open_beneath(root, rel, cap) as src:
        mode = 0o755 if os.fstat(src.fileno()).st_mode & 0o111 else 0o644
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            copied = 0
            for block in iter(lambda: src.read(1 << 20), b""):
                copied += len(block)
                if copied > cap:
                    raise Untrusted(f"{rel}: over the {cap}-byte cap")
                out.write(block)


def input_file(jobdir: Path, name: str, data: bytes) -> Path:
    """A file the harness hands a run (readable by the sandbox, writable by nobody else), in
    `inputs/`, a directory only the harness writes; a new file each time, never through a link."""
    folder = harness_dir(jobdir / "inputs")
    path = folder / name
    path.unlink(missing_ok=True)
    return write_new(path, data)


def remove_tree(path: Path) -> None:
    """shutil.rmtree never follows a link out of the tree (it works on file descriptors)."""
    shutil.rmtree(path, ignore_errors=True)


def cache_put(path: Path, value: Any) -> None:
    """Write a cache entry and record its sha256 in the folder's manifest (harness-only dirs)."""
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    harness_dir(path.parent, 0o700)
    data = json.dumps(value).encode()
    write_replace(path, data, 0o600)
    manifest = _manifest(path.parent)
    manifest[path.name] = hashlib.sha256(data).hexdigest()
    write_replace(path.parent / MANIFEST, json.dumps(manifest, sort_keys=True).encode(), 0o600)


def cache_get(path: Path, cap: int) -> Any | None:
    """A cache entry whose bytes hash to its manifest entry; anything else is a miss."""
    expected = _manifest(path.parent).get(path.name)
    if expected is None:
        return None
    try:
        data = read(path, cap)
    except (Untrusted, OSError):
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        return None
    return json.loads(data)


def _manifest(folder: Path) -> dict[str, str]:
    try:
        doc = json.loads(read(folder / MANIFEST, 64 << 20))
    except (Untrusted, OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
