#!/usr/bin/python3 -I
"""The sandbox launcher: the only code that runs as root, and only to drop into the sandbox.

    sandbox_exec.py run SPEC_JSON -- ARGV...   start ARGV as the sandbox user
    sandbox_exec.py kill USER                  kill every process of the sandbox user

`run` enters new network (unless the spec allows network), UTS and IPC namespaces, sets the
fixed host name, applies the resource limits, drops every privilege (no groups, no new
privileges), sets exactly the environment the spec gives, and execs ARGV. A harness that is root
runs this file directly; an unprivileged harness runs the root-owned copy `evalbot box init`
installs, through a sudo rule that allows nothing else. Self-contained: stdlib only, no imports
from the engine package, so the installed copy does not depend on a job directory.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import pwd
import resource
import signal
import socket
import struct
import sys
import time

CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x04000000, 0x08000000, 0x40000000
PR_SET_NO_NEW_PRIVS = 38
ALLOWED_USER_FILE = "/etc/evalbot/sandbox-user"  # written by `evalbot box init`
LIMITS = {"as_mb": (resource.RLIMIT_AS, 1 << 20), "nproc": (resource.RLIMIT_NPROC, 1),
          "fsize_mb": (resource.RLIMIT_FSIZE, 1 << 20), "nofile": (resource.RLIMIT_NOFILE, 1)}
EXIT_SETUP = 126  # the sandbox could not be set up: infrastructure, never the PR


def fail(message: str) -> None:
    print(f"sandbox: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_SETUP)


def sandbox_user(name: str) -> pwd.struct_passwd:
    """The target user: never root, and the one box init named when it is configured."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        fail(f"no such user {name!r} (run `evalbot box init`)")
        raise
    if entry.pw_uid == 0:
        fail("refusing to run the sandbox as root")
    if os.path.exists(ALLOWED_USER_FILE):
        with open(ALLOWED_USER_FILE) as f:
            if f.read().strip() != name:
                fail(f"user {name!r} is not the sandbox user named in {ALLOWED_USER_FILE}")
    return entry


def unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        fail(f"unshare failed: {os.strerror(ctypes.get_errno())}")


def loopback_up() -> None:
    """The fresh network namespace has only `lo`, down; local sockets still need it up."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 0x1))  # SIOCSIFFLAGS, UP


def apply_limits(limits: dict[str, int]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, value in limits.items():
        if key not in LIMITS:
            fail(f"unknown limit {key!r}")
        which, scale = LIMITS[key]
        hard = int(value) * scale
        resource.setrlimit(which, (hard, hard))  # soft = hard: the sandbox cannot raise it


def drop_to(entry: pwd.struct_passwd) -> None:
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        fail("could not drop root")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # setuid binaries grant nothing
        fail("could not set no_new_privs")


def confine(spec: dict[str, object]) -> None:
    """Everything but the exec: namespaces, host name, limits, the user. Runs in the child."""
    entry = sandbox_user(str(spec["user"]))
    network = bool(spec.get("network", False))
    unshare(CLONE_NEWUTS | CLONE_NEWIPC | (0 if network else CLONE_NEWNET))
    socket.sethostname(str(spec.get("hostname", "evalbot-sandbox")))
    if not network:
        loopback_up()
    apply_limits(dict(spec.get("limits") or {}))  # type: ignore[call-overload]
    drop_to(entry)
    os.umask(0o022)
    os.chdir(str(spec["cwd"]))


def environment(spec: dict[str, object]) -> dict[str, str]:
    """Exactly the spec's variables and who we are: nothing inherited."""
    env = {str(k): str(v) for k, v in dict(spec.get("env") or {}).items()}  # type: ignore[call-overload]
    env.update(USER=str(spec["user"]), LOGNAME=str(spec["user"]))
    return env


def run(spec: dict[str, object], argv: list[str]) -> None:
    confine(spec)
    try:
        os.execvpe(argv[0], argv, environment(spec))
    except OSError as exc:
        print(f"sandbox: cannot execute {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


def kill_all(name: str) -> int:
    """kill(-1) as the sandbox user reaches every process of that user, forks included."""
    entry = sandbox_user(name)
    for _ in range(20):
        child = os.fork()
        if child == 0:
            try:
                drop_to(entry)
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os._exit(0)
        os.waitpid(child, 0)
        if not live_processes(entry.pw_uid):
            return 0
        time.sleep(0.05)
    print(f"sandbox: processes of {name} survive: {live_processes(entry.pw_uid)}", file=sys.stderr)
    return 1


def live_processes(uid: int) -> list[int]:
    """Processes of uid that are not zombies (a zombie runs nothing; its parent reaps it)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(pid))
    return found


def main(args: list[str]) -> int:
    if os.geteuid() != 0:
        fail("must run as root (directly, or through the sudo rule `evalbot box init` writes)")
    if len(args) >= 3 and args[0] == "run" and args[2] == "--" and len(args) > 3:
        run(json.loads(args[1]), args[3:])
    if len(args) == 2 and args[0] == "kill":
        return kill_all(args[1])
    fail("usage: sandbox_exec.py run SPEC_JSON -- ARGV... | kill USER")
    return EXIT_SETUP


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
