"""The sandbox, for real: another user, its own network and UTS namespaces, limits, no survivors.

Each probe runs through engine.sandbox.proc.run exactly as a build or sample does, with a hostile
script in place of the engine; the harness's own run then faces a hostile pull request.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import parse_job
from evalbot.engine.harness.steps import run_job
from evalbot.engine.sandbox import proc
from evalbot.engine.sandbox import session as sandbox
from tests.sshd import SANDBOX_USER, ensure_sandbox_user, pin_model, system_python
from tests.stub_engine import GIT_ENV, job_doc, make_repo

PROBE = r'''
import json, os, socket, sys, resource
out = {"uid": os.getuid(), "hostname": socket.gethostname(), "env": sorted(os.environ),
       "nics": sorted(name for _, name in socket.if_nameindex())}
def attempt(name, fn):
    try:
        fn(); out[name] = "allowed"
    except OSError as exc:
        out[name] = type(exc).__name__
attempt("connect", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2))
attempt("read_token", lambda: open(sys.argv[2]).read())
attempt("write_artifact", lambda: open(sys.argv[3], "w").write("evil"))
attempt("list_other_job", lambda: os.listdir(sys.argv[4]))
attempt("list_jobs", lambda: os.listdir(sys.argv[5]))
out["limits"] = {n: resource.getrlimit(getattr(resource, n))[0]
                 for n in ("RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_AS")}
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
if os.fork() == 0:  # a daemon that leaves the process group and hides in its own session
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        import time
        time.sleep(600)
    os._exit(0)
os.wait()
print("PROBE " + json.dumps(out))
'''


@pytest.fixture
def box() -> Iterator[Path]:
    ensure_sandbox_user()
    with tempfile.TemporaryDirectory(prefix="evalbot-sbx-") as tmp:
        os.chmod(tmp, 0o711)
        yield Path(tmp)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as s:  # on the host's loopback: reachable only with the host's network
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _enter(box: Path, repo: Path, base: str, head: str, **spec: object) -> Path:
    doc = job_doc(repo, base, head)
    pin_model(doc, box)
    doc["sandbox"] = {"user": SANDBOX_USER, "hostname": "sandboxed",
                      "limits": {"run": {"nproc": 64, "fsize_mb": 16, "as_mb": 4096}}, **spec}
    jobdir = box / "jobs" / "job1"
    jobdir.mkdir(parents=True)
    sandbox.enter(parse_job(doc), jobdir)
    return jobdir


@pytest.fixture
def stub(box: Path) -> tuple[Path, str, dict[str, str]]:
    return make_repo(box / "src", {"same": {}})


# A root harness confines the child between fork and exec; an unprivileged one goes through the
# launcher process (installed root-owned behind a sudo rule; run directly here, as root).
LAUNCHERS = {"in-process": [], "launcher": [sys.executable, "-I", str(sandbox.EXEC)]}


@pytest.mark.parametrize("mode", sorted(LAUNCHERS))
def test_sandboxed_process_is_confined(box, stub, listener, tmp_path, monkeypatch, mode):
    monkeypatch.setenv("EVALBOT_GITHUB_TOKEN", "ghp_planted")
    (box / "jobs" / "other").mkdir(parents=True)
    (box / "jobs" / "other" / "secret").write_text("other job")
    jobdir = _enter(box, stub[0], stub[1], stub[2]["same"], launcher=LAUNCHERS[mode])
    token = box / "token"
    token.write_text("ghp_planted")
    token.chmod(0o600)
    artifact = jobdir / "artifacts" / "base" / "engine"
    artifact.parent.mkdir(parents=True)
    artifact.write_text("trusted")
    args = [str(listener), str(token), str(artifact), str(box / "jobs" / "other"),
            str(box / "jobs")]
    done = proc.run([system_python(), "-c", PROBE, *args], cwd=artifact.parent,
                    timeout_s=60, log=tmp_path / "probe.log", env={"OMP_NUM_THREADS": "1"})
    sandbox._active = None
    line = next(x for x in done.output.splitlines() if x.startswith("PROBE "))
    out = json.loads(line[len("PROBE "):])
    assert out["uid"] == pwd.getpwnam(SANDBOX_USER).pw_uid
    assert out["hostname"] == "sandboxed"
    assert "EVALBOT_GITHUB_TOKEN" not in out["env"] and "OMP_NUM_THREADS" in out["env"]
    assert out["connect"] != "allowed" and out["nics"] == ["lo"]  # no network: own namespace
    assert out["read_token"] == "PermissionError"
    assert out["write_artifact"] in ("PermissionError", "OSError")  # EROFS: read-only mount
    assert artifact.read_text() == "trusted"
    assert out["list_other_job"] == "PermissionError" and out["list_jobs"] == "PermissionError"
    assert out["limits"] == {"RLIMIT_NPROC": 64, "RLIMIT_FSIZE": 16 << 20,
                             "RLIMIT_AS": 4096 << 20}
    assert out["pids"] == [1, 2]  # its own PID namespace: bwrap's init and the probe
    assert _processes_of(SANDBOX_USER) == []  # the double-forked daemon did not outlive the run


def test_a_fork_bomb_is_bounded_and_cleaned_up(box, stub, tmp_path):
    _enter(box, stub[0], stub[1], stub[2]["same"])
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    done = proc.run([system_python(), "-c", bomb], cwd=box, timeout_s=2,
                    log=tmp_path / "bomb.log")
    sandbox._active = None
    assert done.timed_out
    assert _processes_of(SANDBOX_USER) == []


def test_a_hostile_pull_request_gets_nothing_through(box, stub):
    repo, main, _ = stub
    head = _hostile_commit(repo, main)
    py = system_python()
    doc = job_doc(repo, main, head)
    pin_model(doc, box)
    doc.update(build_argv=[py, "build.py"], cache_dir=str(box / "cache"),
               sandbox={"user": SANDBOX_USER})
    doc["runs"][0]["argv"][0] = py
    jobdir = box / "jobs" / "job1"
    jobdir.mkdir(parents=True)
    results = run_job(parse_job(doc), jobdir)
    sandbox._active = None
    assert results["failures"] == []  # base's artifacts verified intact before every sample
    log = (jobdir / "logs" / "build-head.log").read_text()
    assert "overwrite-base: OSError" in log or "overwrite-base: PermissionError" in log
    assert "write-cache: PermissionError" in log
    assert "network: OSError" in log or "network: ConnectionRefusedError" in log
    assert _processes_of(SANDBOX_USER) == []


def test_a_model_that_does_not_hash_right_stops_the_job_as_infra(box, stub):
    doc = job_doc(stub[0], stub[1], stub[2]["same"])
    model = pin_model(doc, box)
    model.write_bytes(b"swapped weights")
    doc["sandbox"] = {"user": SANDBOX_USER}
    jobdir = box / "jobs" / "job1"
    jobdir.mkdir(parents=True)
    results = run_job(parse_job(doc), jobdir)
    sandbox._active = None
    failure = results["failures"][0]
    assert (failure["attribution"], failure["kind"]) == ("infra", "infra-error")
    assert "model m: sha256 of" in failure["log_tail"]
    assert not (jobdir / "trees" / "base").exists()  # nothing of the PR ran


def test_invalid_sandbox_settings_name_the_field(stub):
    doc = job_doc(stub[0], stub[1], stub[2]["same"])
    doc["sandbox"] = {"user": SANDBOX_USER, "limits": {"run": {"memory": 5}}}
    with pytest.raises(ContractError, match=r"sandbox.limits.run.memory"):
        parse_job(doc)


HOSTILE_BUILD = r'''
import os, socket, sys, shutil
from pathlib import Path
jobdir = Path.cwd().parent.parent
def attempt(name, fn):
    try:
        fn(); print(f"{name}: allowed")
    except OSError as exc:
        print(f"{name}: {type(exc).__name__}")
attempt("overwrite-base", lambda: open(jobdir / "artifacts/base/build/engine.py", "w").write("x"))
attempt("write-cache", lambda: open(jobdir.parent.parent / "cache/evil", "w").write("x"))
attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=2))
if os.fork() == 0:  # a daemon with its output closed, so the build itself ends
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    import time; time.sleep(600)
Path("build").mkdir(exist_ok=True)
shutil.copy("engine.py", "build/engine.py")
shutil.copy("speed.json", "build/speed.json")
print('BENCH_JSON {"128": {"decode_tps": 1e9, "prefill_tps": 1e9}}')  # a fake results line
'''


def _hostile_commit(repo: Path, main: str) -> str:
    env = {**os.environ, **GIT_ENV}
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "checkout", "-q", "--detach", main], check=True, env=env)
    (repo / "build.py").write_text(HOSTILE_BUILD)
    subprocess.run([*git, "commit", "-q", "-am", "hostile"], check=True, env=env)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, env=env, capture_output=True,
                         text=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "main"], check=True, env=env)
    return sha


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _processes_of(user: str) -> list[int]:
    uid = pwd.getpwnam(user).pw_uid
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _uid(int(p)) == uid
            and _alive(int(p))]


def _uid(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


@pytest.mark.parametrize("mode", sorted(LAUNCHERS))
def test_a_handoff_witness_gets_its_prompt_through_the_sandbox(box, stub, tmp_path, mode):
    """The handoff clock's stdin passes the launcher (exec) to the sandbox user's process, and
    the prompt arrives only after READY (engine.sandbox.proc.Handoff, docs/trust.md)."""
    from evalbot.engine.contract.witness_spec import READY

    jobdir = _enter(box, stub[0], stub[1], stub[2]["same"], launcher=LAUNCHERS[mode])
    work = jobdir / "artifacts" / "base"
    work.mkdir(parents=True)
    script = (f"import os, select, sys\nearly = bool(select.select([sys.stdin], [], [], 0)[0])\n"
              f"print({READY!r}, flush=True)\nids = sys.stdin.readline().split()\n"
              f"print('OUTPUT_IDS:', os.getuid(), early, ' '.join(ids[::-1]), flush=True)\n")
    handoff = proc.Handoff(READY.encode(), b"5 6 7\n", b"OUTPUT_IDS:")
    done = proc.run([system_python(), "-c", script], cwd=work, timeout_s=60,
                    log=tmp_path / "w.log", handoff=handoff)
    sandbox._active = None
    assert done.ok and done.handoff_s is not None, done.output
    line = next(x for x in done.output.splitlines() if x.startswith("OUTPUT_IDS:"))
    assert line.split()[1:] == [str(pwd.getpwnam(SANDBOX_USER).pw_uid), "False", "7", "6", "5"]
