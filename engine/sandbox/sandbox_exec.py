#!/usr/bin/python3 -I
"""The sandbox launcher: the only code that runs as root, and only to drop into the sandbox.

    sandbox_exec.py run SPEC_JSON -- ARGV...   start ARGV in the sandbox, as the sandbox user
    sandbox_exec.py check USER                 start /bin/true so; exit 0 when the sandbox works
    sandbox_exec.py kill USER                  kill every process of the sandbox user

The sandbox is bubblewrap's (`bwrap`, Debian's package `bubblewrap`), started unprivileged as the
sandbox user in a user namespace of its own (`bwrap_argv` says what it sees): new PID, network
(loopback only, unless the spec allows network), UTS (a fixed host name), IPC and mount
namespaces; `/` read-only; a private `/tmp`, `/var/tmp`, `/dev/shm`, `/run` (and `/run/lock`,
`/var/lock`) per run, gone with its mount namespace, each a tmpfs of the spec's `tmpfs_mb` (its
pages are RAM: unsized, each could take half of it); empty, read-only directories over the box's
state (`MASKED`: other users' homes, logs, login records, the SSH and network configuration, the
cgroup tree; `net_devices`: the host's network interfaces in sysfs, their MAC addresses);
`/etc/passwd`, `/etc/group`, `/etc/hosts` and `/etc/hostname` that name nobody of the box, an
`/etc/machine-id` the same on every box; the GPU devices bound in. What stays hand-written, and
why bubblewrap cannot do it:

- **becoming the sandbox user** (`drop_to`) and **the limits** (`apply_limits`): bwrap's
  `--uid` only renames a user inside its namespace; the files of the box must see the sandbox
  user's own uid, so root drops to it before bwrap starts, and the rlimits are inherited;
- **`kill`**: bwrap ends a run as a whole (`--die-with-parent`: when the run's first process
  exits, or the harness dies, its PID namespace goes, orphans and daemons with it), but a
  harness that is not root cannot signal the sandbox user's processes to end a run that timed
  out, and the next run must start only once none is left: the launcher kills every process of
  the sandbox user (kill(-1) as that user reaches into every namespace it made) and checks.

A harness that is root runs this file as a process of its own; an unprivileged harness runs the
root-owned copy `evalbot box init` installs, through a sudo rule that allows nothing else.
Self-contained: stdlib only, no imports from the engine package, so the installed copy does not
depend on a job directory.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import pwd
import resource
import signal
import sys
import time

PR_SET_NO_NEW_PRIVS = 38
ALLOWED_USER_FILE = "/etc/evalbot/sandbox-user"  # written by `evalbot box init`
BWRAP = ("/usr/bin/bwrap", "/usr/local/bin/bwrap")  # root never looks it up on a PATH
LIMITS = {"as_mb": (resource.RLIMIT_AS, 1 << 20), "data_mb": (resource.RLIMIT_DATA, 1 << 20),
          "nproc": (resource.RLIMIT_NPROC, 1), "fsize_mb": (resource.RLIMIT_FSIZE, 1 << 20),
          "nofile": (resource.RLIMIT_NOFILE, 1)}
TMPFS_MB = 64  # each private tmpfs of a run unless its spec says (`tmpfs_mb`): RAM, not disk
MASKED_SIZE = 1 << 16  # bytes of each masked place's tmpfs (empty and read-only anyway)
EXIT_SETUP = 126  # the sandbox could not be set up: infrastructure, never the PR
INSIDE_USER = "sandbox"  # the name the run sees for itself: the box's user names stay unknown
# Writable, empty and the run's own (gone with its mount namespace): nothing one run leaves
# there reaches another, and nothing of the box is seen there (sockets, pid files, locks).
PRIVATE = ("/tmp", "/var/tmp", "/run", "/var/lock")
# The box's state, none of a run's business: each becomes an empty, read-only directory. Other
# users' homes (keys, shell histories), logs and login records (user names, addresses), service
# state (DHCP leases: addresses), the SSH, network and service configuration (the SSH port), and
# the cgroup tree (the harness's per-run cgroup shows while it times a witness: a run that saw
# it would know it is one; its own cgroup namespace already hides the path in /proc/self).
MASKED = ("/home", "/root", "/srv", "/mnt", "/media", "/var/log", "/var/lib", "/var/mail",
          "/var/spool", "/var/backups", "/etc/ssh", "/etc/network", "/etc/systemd",
          "/etc/NetworkManager", "/etc/netplan", "/etc/sudoers.d", "/etc/evalbot",
          "/sys/fs/cgroup")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
# What every run reads as /etc/machine-id: one value for every box, so no run can tell boxes
# (or a box's reinstalls) apart by it, nor link its runs on one box to a later PR's.
MACHINE_ID = "0e7a1b0d5a9d4c3e8f2b6a1c9d8e7f60"
USERNS_HINT = ("bubblewrap could not make its namespaces as an unprivileged user. On Debian "
               "and Ubuntu: `sysctl kernel.unprivileged_userns_clone=1`; everywhere: "
               "`sysctl user.max_user_namespaces=15000`; on Ubuntu 23.10 and later also "
               "`sysctl kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile "
               "for /usr/bin/bwrap); in a container, a runtime that allows user namespaces")


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


def bwrap_path() -> str:
    for path in BWRAP:
        if os.access(path, os.X_OK):
            return path
    fail("bubblewrap is not installed (apt-get install bubblewrap; `evalbot box init` does it)")
    return ""


def apply_limits(limits: dict[str, int]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, value in limits.items():
        if key not in LIMITS:
            fail(f"unknown limit {key!r}")
        which, scale = LIMITS[key]
        hard = int(value) * scale
        resource.setrlimit(which, (hard, hard))  # soft = hard: the sandbox cannot raise it


def drop_to(entry: pwd.struct_passwd, no_new_privs: bool = True) -> None:
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        fail("could not drop root")
    libc = ctypes.CDLL(None, use_errno=True)
    if no_new_privs and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("could not set no_new_privs")


def etc_files(spec: dict[str, object], entry: pwd.struct_passwd) -> dict[str, str]:
    """The files of /etc that would name the box's users, host name and addresses, as the run
    sees them instead (only those the box has: bwrap cannot add a file to a read-only /)."""
    host = str(spec.get("hostname", "evalbot-sandbox"))
    home = str(spec.get("home") or "/nonexistent")
    files = {"/etc/passwd": f"root:x:0:0::/root:/usr/sbin/nologin\n{INSIDE_USER}:x:"
                            f"{entry.pw_uid}:{entry.pw_gid}::{home}:/usr/sbin/nologin\n"
                            "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n",
             "/etc/group": f"root:x:0:\n{INSIDE_USER}:x:{entry.pw_gid}:\nnogroup:x:65534:\n",
             "/etc/hosts": f"127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t{host}\n",
             "/etc/hostname": f"{host}\n", "/etc/mailname": f"{host}\n", "/etc/subuid": "",
             "/etc/subgid": "", "/etc/resolv.conf": "", "/etc/motd": "",
             "/etc/machine-id": f"{MACHINE_ID}\n"}
    return {path: body for path, body in files.items()
            if os.path.isfile(path) and not os.path.islink(path)}


def data_fds(files: dict[str, str]) -> list[str]:
    """--ro-bind-data arguments: each file's text in a pipe bwrap reads (all fit a pipe)."""
    args = []
    for path, body in files.items():
        read, write = os.pipe()
        os.write(write, body.encode())
        os.close(write)
        os.set_inheritable(read, True)
        args += ["--ro-bind-data", str(read), path]
    return args


def net_devices() -> list[str]:
    """The host's network interfaces in sysfs (their MAC addresses): /sys/class/net and the
    `net` directory of each interface's device. The run's own network namespace has only its
    loopback; these would still show the box's."""
    found = ["/sys/class/net"]
    for link in glob.glob("/sys/class/net/*"):
        found.append(os.path.dirname(os.path.realpath(link)))
    return sorted(dict.fromkeys(found))


def hides(path: str) -> bool:
    """Whether binding `path` back would uncover a private or masked place (a harness whose
    sys.path holds /tmp); one the user cannot read (checked as the user) it cannot bind."""
    path = os.path.normpath(path)
    return any(p == path or p.startswith(path.rstrip("/") + "/") for p in ("/", *PRIVATE, *MASKED))


def bwrap_argv(bwrap: str, spec: dict[str, object], data: list[str],
               argv: list[str]) -> list[str]:
    """What the run sees: / read-only, the private and masked places, the run's own paths."""
    network = bool(spec.get("network", False))
    size = ["--size", str(int(spec.get("tmpfs_mb") or TMPFS_MB) << 20)]  # type: ignore[call-overload]
    args = [bwrap, "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", *([] if network else ["--unshare-net"]),
            "--hostname", str(spec.get("hostname", "evalbot-sandbox")), "--new-session",
            "--die-with-parent",
            "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", *size, "--tmpfs", "/dev/shm"]
    for pattern in GPU_DEVICES if spec.get("gpu", True) else ():
        for dev in sorted(glob.glob(pattern)):
            args += ["--dev-bind", dev, dev]
    masked = [p for p in (*MASKED, *net_devices()) if os.path.isdir(p) and not os.path.islink(p)]
    for path in PRIVATE:
        if os.path.isdir(path) and not os.path.islink(path):  # /var/lock is mostly /run/lock
            args += ["--perms", "1777", *size, "--tmpfs", path]
    args += ["--perms", "1777", "--dir", "/run/lock"]
    for path in masked:
        args += ["--perms", "0755", "--size", str(MASKED_SIZE), "--tmpfs", path]
    for path in spec.get("ro") or []:  # type: ignore[attr-defined]
        mode = os.X_OK if os.path.isdir(str(path)) else os.R_OK  # (this runs as the user)
        if os.access(str(path), mode) and not hides(str(path)):
            args += ["--ro-bind", str(path), str(path)]
    for path in spec.get("rw") or []:  # type: ignore[attr-defined]
        args += ["--bind", str(path), str(path)]
    if spec.get("home"):
        args += ["--perms", "0700", *size, "--tmpfs", str(spec["home"])]
    args += data
    for path in masked:
        args += ["--remount-ro", path]
    return [*args, "--chdir", str(spec["cwd"]), "--", *argv]


def environment(spec: dict[str, object]) -> dict[str, str]:
    """Exactly the spec's variables and who we are: nothing inherited."""
    env = {str(k): str(v) for k, v in dict(spec.get("env") or {}).items()}  # type: ignore[call-overload]
    env.update(USER=INSIDE_USER, LOGNAME=INSIDE_USER)
    return env


def run(spec: dict[str, object], argv: list[str]) -> None:
    """Become the sandbox user with the stage's limits, then exec bwrap. bwrap sets
    no_new_privs on the run itself; setting it here first would stop a setuid bwrap (the way
    some distributions allow it namespaces) from working."""
    entry = sandbox_user(str(spec["user"]))
    bwrap = bwrap_path()
    apply_limits(dict(spec.get("limits") or {}))  # type: ignore[call-overload]
    data = data_fds(etc_files(spec, entry))
    os.chdir("/")
    drop_to(entry, no_new_privs=False)
    os.umask(0o022)
    try:
        os.execve(bwrap, bwrap_argv(bwrap, spec, data, argv), environment(spec))
    except OSError as exc:
        fail(f"cannot execute {bwrap}: {exc.strerror}")


def check(name: str) -> int:
    """Start /bin/true in the sandbox as a run does: 0 when it works, else why not. (In a child
    of this process, not a new one: doctor runs this file's text with `python -c`.)"""
    spec = {"user": name, "cwd": "/", "env": {"PATH": "/usr/bin:/bin"}, "gpu": False,
            "tmpfs_mb": 1, "limits": {"data_mb": 256}}  # as every run is: both applied
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        os.dup2(write, 2)
        os.dup2(os.open(os.devnull, os.O_RDWR), 1)
        run(spec, ["/bin/true"])
        os._exit(EXIT_SETUP)
    os.close(write)
    err = b""
    while chunk := os.read(read, 65536):
        err += chunk
    os.close(read)
    status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    if status == 0:
        print("sandbox: bubblewrap works (each run: sized tmpfs, RLIMIT_DATA)")
        return 0
    why = (err.decode(errors="replace").strip().splitlines() or [f"exit {status}"])[-1]
    hint = USERNS_HINT if why.startswith("bwrap") else ""
    print(f"sandbox: does not work: {why}{'. ' + hint if hint else ''}", file=sys.stderr)
    return 1


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
    if len(args) == 2 and args[0] in ("kill", "check"):
        return kill_all(args[1]) if args[0] == "kill" else check(args[1])
    fail("usage: sandbox_exec.py run SPEC_JSON -- ARGV... | check USER | kill USER")
    return EXIT_SETUP


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
