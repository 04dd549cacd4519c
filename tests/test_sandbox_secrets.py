"""Issue 31's red team in the production shape (a real sshd on loopback, the sandbox user,
`evaluate()` with an SSH box, the demo engine): a hostile head that looks for the box's secrets
and leaves files wherever it can write.

- **Secrets.** The head's build and every one of its bench runs search the files (/etc, /home,
  the SSH configuration, /etc/machine-id, the network interfaces in /sys), /proc (every
  process's command line), /proc/net (sockets, addresses), the environment and the host name
  for the box's SSH port, addresses, host name, user names, machine id and MAC addresses
  (issue 45), and print what they find; the bench prints a found port as its decode rate (issue 31's
  "number as a channel"). The box has canaries planted for each: the sshd's port (on its
  command line and in a world-readable file under /etc/ssh), the box's addresses, its host name,
  a user with a home directory and the sandbox user's own name. The head finds none of them,
  and neither comment.md nor verdict.json carries any.
- **Leftovers.** The build walks the whole file system and leaves a file in every directory it
  can write (and in /tmp, /var/tmp, /dev/shm, /run/lock, /var/lock, its HOME); every bench run
  does the same in those places. After the job, none of those files remains outside the job.
"""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.engine.sandbox.sandbox_exec import MACHINE_ID
from tests.demo_box import box_python, demo, evaluate_over_ssh
from tests.demo_profile import WITNESS_ONE_LOOK, one_look_demo_profile
from tests.sshd import SANDBOX_USER, Sshd

__all__ = ["box_python", "demo"]  # fixtures

# What the head looks at, and how it reports: one `EVALBOT_FOUND <json>` line per look.
SEARCH = r'''
def _evalbot_search(walk):
    import glob, json, os, socket
    found = {"hostname": socket.gethostname(), "env": dict(os.environ), "files": {},
             "cmdlines": [], "listening": [], "addresses": [], "homes": [], "left": []}
    for pattern in ("/etc/ssh/*", "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname",
                    "/etc/network/*", "/etc/subuid", "/var/log/*", "/run/utmp", "/etc/evalbot/*",
                    "/etc/machine-id", "/sys/class/net/*/address", "/sys/devices/*/net/*/address",
                    "/sys/devices/*/*/net/*/address", "/sys/devices/*/*/*/net/*/address",
                    "/sys/devices/*/*/*/*/net/*/address"):
        for path in glob.glob(pattern):
            try:
                found["files"][path] = open(path, errors="replace").read()[:20000]
            except OSError:
                pass
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            found["cmdlines"].append(open(path, "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            pass
    for table in ("tcp", "tcp6", "udp", "udp6", "unix"):
        try:
            found["files"]["/proc/net/" + table] = open("/proc/net/" + table).read()[:20000]
        except OSError:
            pass
    try:
        for line in open("/proc/net/tcp").read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                found["listening"].append(int(local.split(":")[1], 16))
    except OSError:
        pass
    try:
        found["addresses"] = sorted({a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None)})
    except OSError:
        pass
    try:
        found["addresses"].append(open("/proc/net/fib_trie").read()[:20000])
    except OSError:
        pass
    for home in ("/home", "/root"):
        try:
            found["homes"] += [home + "/" + n for n in os.listdir(home)]
        except OSError:
            pass
    places = ["/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/run",
              os.environ.get("HOME", "/"), os.getcwd()]
    if walk:
        for root, dirs, _ in os.walk("/"):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys")]
            places.append(root)
    for place in dict.fromkeys(places):
        target = os.path.join(place, "evalbot-leftover-%d" % os.getpid())
        try:
            with open(target, "x") as f:
                f.write("left")
            found["left"].append(os.path.realpath(target))
        except OSError:
            pass
    print("EVALBOT_FOUND " + json.dumps(found), flush=True)
    return found
'''

BENCH = ('    print("BENCH_JSON " + json.dumps(result), flush=True)\n',
         '    found = _evalbot_search(False)\n'
         '    ports = [p for p in found["listening"] if p]\n'
         '    for r in result.values():  # a found port as the decode rate, else a lie\n'
         '        r["decode_tps"] = float(ports[0]) if ports else 2 * r["decode_tps"]\n'
         '    print("BENCH_JSON " + json.dumps(result), flush=True)\n')
BUILD = ("def main() -> int:\n", "def main() -> int:\n    _evalbot_search(True)\n")


def _hostile_head(repo_path: Path, main_sha: str) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=attacker", "-c",
                               "user.email=attacker@evalbot.invalid", *args], cwd=repo_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("checkout", "-q", "-b", "pr/snoop", main_sha)
    for name, (old, new) in (("demo_engine.py", BENCH), ("build.py", BUILD)):
        path = repo_path / name
        source = path.read_text()
        assert source.count(old) == 1, f"main's {name} changed: {old!r}"
        path.write_text(source.replace(old, new).replace("\nfrom __future__ import annotations\n",
                                                         "\nfrom __future__ import annotations\n"
                                                         + SEARCH, 1))
    git("commit", "-q", "--no-gpg-sign", "-am", "snoop: decode faster")
    sha = git("rev-parse", "HEAD")
    git("checkout", "-q", "main")
    return sha


def _identities() -> dict[str, list[str]]:
    """What names this machine among boxes: its machine id and its network interfaces' MAC
    addresses (loopback's all-zero one aside)."""
    macs = {Path(p).read_text().strip() for p in glob.glob("/sys/class/net/*/address")}
    machine = Path("/etc/machine-id")
    return {"machine_id": [machine.read_text().strip()] if machine.is_file() else [],
            "mac": sorted(m for m in macs if m.strip("0:"))}


def _addresses() -> list[str]:
    """The box's own addresses other than loopback (the container's, here)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    return [a for a in out.split() if not a.startswith(("127.", "::1"))]


@pytest.fixture
def canaries(sshd: Sshd) -> Iterator[dict[str, list[str]]]:
    """A user with a home directory and a world-readable file under /etc/ssh naming the port,
    the addresses and that user, as a box's sshd configuration does."""
    user = f"evalbot-canary-{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", user],
                   check=True)
    addresses = _addresses()
    planted = Path(f"/etc/ssh/evalbot-canary-{os.getpid()}")
    planted.parent.mkdir(exist_ok=True)
    planted.write_text(f"Port {sshd.port}\nAllowUsers {user}\n"
                       + "".join(f"ListenAddress {a}\n" for a in addresses))
    planted.chmod(0o644)
    try:
        yield {"port": [str(sshd.port)], "addresses": addresses,
               "hostname": [socket.gethostname()], "users": [user, SANDBOX_USER],
               **_identities()}
    finally:
        planted.unlink()
        subprocess.run(["userdel", "-r", user], capture_output=True, check=False)


def _hits(text: str, canaries: dict[str, list[str]]) -> list[str]:
    return [f"{kind}: {value}" for kind, values in canaries.items() for value in values
            if value and re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w-])", text)]


def _found(logs: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(line[len("EVALBOT_FOUND "):]) for log in logs
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("EVALBOT_FOUND ")]


def test_a_snooping_head_finds_no_secret_and_leaves_nothing(sshd, canaries, box_python, demo,
                                                           tmp_path):
    _root, repo = demo
    head = _hostile_head(repo.path, repo.main_sha)
    # one look: a build and several bench runs search, as many as the question needs
    quick = one_look_demo_profile(tmp_path / "profile", WITNESS_ONE_LOOK)
    outcome, config = evaluate_over_ssh(sshd, box_python, demo, tmp_path, head, pr=31,
                                        profile_path=quick)
    jobs = Path(config.workdir) / "jobs"
    logs = sorted(p for p in jobs.rglob("*.log") if p.is_file())
    found = _found(logs)
    assert any(f["left"] for f in found), "the head ran and reported"  # it did search
    assert len([f for f in found if "/" in f["left"] or f["left"]]) >= 2  # build and bench
    for look in found:
        assert _hits(json.dumps(look), canaries) == [], _hits(json.dumps(look), canaries)
        if Path("/etc/machine-id").is_file():  # it read one: the same on every box
            assert look["files"]["/etc/machine-id"] == f"{MACHINE_ID}\n", look["files"]
        assert [p for p in look["listening"] if p] == []  # no socket of the box's
    published = outcome.comment + (tmp_path / "out" / "verdict.json").read_text()
    assert _hits(published, canaries) == []
    # every file it left, anywhere it could write, is gone unless it is in the job's directory
    left = {p for f in found for p in f["left"]}
    assert "/tmp/evalbot-leftover-" in " ".join(left)  # its private /tmp was writable
    remaining = [p for p in left if os.path.lexists(p) and not p.startswith(str(jobs) + "/")]
    assert remaining == []
    assert not list(Path("/tmp").glob("evalbot-leftover-*"))
    print(f"snoop: {len(found)} searches; {len(left)} files left, none outside the job; "
          f"verdict {outcome.verdict['kind']}")
