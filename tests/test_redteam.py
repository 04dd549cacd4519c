"""A hostile pull request against the real sandbox: each attack of issue 13, run through the real
harness (engine.harness.steps.run_job, sandboxed as on a box) and graded and rendered by the real bot
code. Every test asserts final state: the attacker's verdict, the files outside the run's own
directories, and the published text.

The hostile head is one script (`ATTACK`) used as build, timed engine and scorer; what it tries
is chosen per test by `attack.json` in its commit. It tells the truth about nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.redact import for_boxes
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.job import parse_job
from evalbot.engine.harness.steps import run_job
from evalbot.engine.sandbox import session as sandbox
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.publication import graded
from evalbot.report.render import render_comment
from tests.sshd import per_worker, pin_model, system_python
from tests.stub_engine import ENGINE, GIT_ENV, job_doc

# What main's tree holds besides the stub engine: an honest build and scorer.
BUILD = r'''
import shutil
from pathlib import Path
Path("build").mkdir(exist_ok=True)
for name in ("engine.py", "speed.json", "score.py", "attack.json"):
    shutil.copy(name, "build/" + name)
'''
# Predicts each next id with certainty: main agrees with the reference exactly.
SCORER = r'''
import builtins, json, os, sys
tokens, out, topk = sys.argv[1:4]
windows = json.load(open(tokens))
rows = [{"top": [[[w[i + 1] + j, -0.05 - 4 * j] for j in range(int(topk))] for i in range(len(w) - 1)],
         "argmax": [w[i + 1] for i in range(len(w) - 1)]} for w in windows]
if hasattr(builtins, "HIJACKED"):  # planted code ran in this process: it scores garbage
    rows = [{"top": [[[0, -0.05], [1, -4.05]] for _ in r["argmax"]], "argmax": [0] * len(r["argmax"])}
            for r in rows]
if len(sys.argv) > 4:  # the reference: who ran it, and whether planted code reached it
    with open(sys.argv[4], "a") as f:
        f.write(json.dumps({"uid": os.getuid(), "home": os.environ.get("HOME", ""),
                            "hijacked": hasattr(builtins, "HIJACKED")}) + "\n")
json.dump({"windows": rows}, open(out, "w"))
'''
# The planted module: marks the process hijacked and halves what a timed engine reports.
PLANT = r'''
import builtins, sys
builtins.HIJACKED = True
if any(a.endswith("engine.py") for a in sys.argv) and "/artifacts/base/" in " ".join(sys.argv):
    print('BENCH_JSON {"128": {"decode_tps": 1.0, "prefill_tps": 1.0}}')
    sys.exit(0)
'''
ATTACK = r'''
import glob, json, os, site, socket, sys, time
from pathlib import Path
me = Path(__file__).resolve()
cfg = json.load(open(me.with_name("attack.json")))
role = "build" if me.parent.name != "build" else ("score" if "--ctxs" not in sys.argv else "bench")
home = Path(os.environ.get("HOME", "/nonexistent"))
jobdir = Path(cfg["jobdir"])

def attempt(name, fn):
    try:
        got = fn()
        print(f"{role} {name}: allowed {str(got)[:80]!r}", flush=True)
    except Exception as exc:
        print(f"{role} {name}: {type(exc).__name__}", flush=True)

def plant_everywhere():  # every place a later Python might import from
    spots = [home, home / ".local/lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" /
             "site-packages", Path(site.getusersitepackages()), Path("/tmp"), Path("/var/tmp"),
             Path("/dev/shm"), jobdir / "homes", jobdir / "outputs", jobdir / "inputs",
             jobdir / "scratch", jobdir / "score", jobdir / "harness", jobdir]
    for spot in spots:
        for name in ("usercustomize.py", "sitecustomize.py"):
            attempt(f"plant {spot}/{name}", lambda: (spot.mkdir(parents=True, exist_ok=True),
                    (spot / name).write_text(cfg["plant"])))
        attempt(f"plant {spot}/evil.pth", lambda: (spot / "evil.pth").write_text(
            "import builtins; builtins.HIJACKED = True\n"))

def link_everywhere():  # links where the harness wrote or read by name before
    for folder in ("score", "inputs", "outputs", "scratch"):
        for name in ("tokens-0.json", "base-0.json", "head-0.json", "reference-16.json"):
            attempt(f"link {folder}/{name}", lambda: os.symlink(cfg["victim"],
                                                                 jobdir / folder / name))

def snoop():
    for path in cfg["secrets"]:
        attempt(f"read {path}", lambda: open(path).read())
    for path in cfg.get("list", []):
        attempt(f"list {path}", lambda: os.listdir(path))
    attempt("list jobs", lambda: os.listdir(jobdir.parent))
    attempt("write cache", lambda: open(Path(cfg["cache"]) / "builds" / "evil", "w").write("x"))
    for side in ("base", "head"):
        target = jobdir / "artifacts" / side / "build" / "engine.py"
        attempt(f"overwrite {side} artifact", lambda: open(target, "a").write("\n# evil\n"))
        attempt(f"replace {side} artifact", lambda: os.rename(target, target.with_suffix(".x")))

def state_seen():  # anything an earlier run of ours left behind
    spots = [home, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), jobdir / "trees"]
    return any(glob.glob(str(s / "evalbot-attack-state*")) for s in spots)

def leave_state():
    for spot in (home, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), jobdir / "trees"):
        try:
            (spot / f"evalbot-attack-state-{os.getpid()}").write_text("seen")
        except OSError:
            pass

def daemon():  # outlives its run if nothing kills it, and keeps state for the next one
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            while True:
                leave_state()
                for side in ("base", "head"):
                    try:
                        open(jobdir / "artifacts" / side / "build" / "engine.py", "a").write("#")
                    except OSError:
                        pass
                time.sleep(0.05)
        os._exit(0)
    os.wait()

if role == "build":
    if cfg.get("plant"):
        plant_everywhere()
    if cfg.get("links"):
        link_everywhere()
    if cfg.get("snoop"):
        snoop()
    if cfg.get("leak"):
        print(cfg["leak"], flush=True)
        sys.exit(2)
    Path("build").mkdir(exist_ok=True)
    for name in ("engine.py", "speed.json", "score.py", "attack.json"):
        Path("build", name).write_bytes(Path(name).read_bytes())
    sys.exit(0)
if role == "bench":
    if cfg.get("snoop"):
        snoop()
    seen = state_seen()
    leave_state()
    if cfg.get("daemon"):
        daemon()
    ctxs = [int(c) for c in sys.argv[sys.argv.index("--ctxs") + 1].split(",")]
    boost = 2.0 if seen else 1.0  # it knows it ran before: the timed runs report double
    print("BENCH_JSON " + json.dumps({str(c): {"decode_tps": 1000.0 * boost,
                                               "prefill_tps": 1e6 * boost} for c in ctxs}))
    sys.exit(0)
# role == "score": copy main's answers if any run left them readable, else answer garbage.
tokens, out, topk = sys.argv[1:4]
windows = json.load(open(tokens))
for found in glob.glob(str(jobdir / "**" / "*.json"), recursive=True) + glob.glob("/tmp/**/*.json",
                                                                                  recursive=True):
    try:
        doc = json.load(open(found))
    except Exception:
        continue
    if isinstance(doc, dict) and len(doc.get("windows", [])) == len(windows):
        json.dump(doc, open(out, "w"))
        sys.exit(0)
if cfg.get("link_out"):  # hand in a link to a file outside the run instead of a file
    os.symlink(cfg["victim"], out)
    sys.exit(0)
if cfg.get("fifo_out"):  # a FIFO: a harness that opened it to read would wait forever
    os.mkfifo(out)
    sys.exit(0)
rows = [{"top": [[[0, -0.05], [1, -4.05]] for _ in w[1:]], "argmax": [0] * (len(w) - 1)} for w in windows]
json.dump({"windows": rows}, open(out, "w"))
'''
POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
CANARY_TOKEN = "ghp_" + "Rt7" * 12
CANARY_HOOK = "whsec-canary-5f3a9e1c"
BOX_PORT = 48619
# A sandbox user of these tests alone: the sandbox kills every process of its user after each
# run, and other sandboxed tests may run on this machine at the same time.
SANDBOX_USER = per_worker("evalbot-redteam")


@pytest.fixture
def box() -> Iterator[Path]:
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                        "/nonexistent", "--shell", "/usr/sbin/nologin", SANDBOX_USER], check=True)
    with tempfile.TemporaryDirectory(prefix="evalbot-redteam-") as tmp:
        os.chmod(tmp, 0o711)
        yield Path(tmp)
    sandbox._active = None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **GIT_ENV}).stdout.strip()


def _repo(box: Path, attack: dict[str, Any]) -> tuple[Path, str, str]:
    """main: the honest stub engine and scorer; head: ATTACK as build, engine and scorer."""
    repo = box / "src"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    files = {"engine.py": ENGINE, "build.py": BUILD, "score.py": SCORER, "attack.json": "{}",
             "speed.json": json.dumps({"decode": 1000.0, "prefill": 1e6})}
    for name, body in files.items():
        (repo / name).write_text(body)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "main")
    main = _git(repo, "rev-parse", "HEAD")
    for name in ("engine.py", "build.py", "score.py"):
        (repo / name).write_text(ATTACK)
    (repo / "attack.json").write_text(json.dumps(attack))
    _git(repo, "commit", "-q", "-am", "hostile")
    head = _git(repo, "rev-parse", "HEAD")
    return repo, main, head


def _box_files(box: Path, victim: Path) -> tuple[Path, Path, list[Path]]:
    """A victim file (root's, 0600), another job with a secret, and a store next to the jobs."""
    victim.write_text("root's own file\n")
    victim.chmod(0o600)
    other = box / "jobs" / "other"
    other.mkdir(parents=True)
    (other / "secret").write_text(CANARY_TOKEN)
    store = box / "evalbot.sqlite3"
    store.write_text("store " + CANARY_HOOK)
    store.chmod(0o600)
    return other, store, [other / "secret", store, victim]


def _job(box: Path, attack: dict[str, Any], correctness: bool = False) -> tuple[dict, Path]:
    jobdir = box / "jobs" / "job1"
    victim = box / "victim"
    _other, _store, secrets = _box_files(box, victim)
    attack = {"jobdir": str(jobdir), "victim": str(victim), "cache": str(box / "cache"),
              "secrets": [str(s) for s in secrets], **attack}
    repo, main, head = _repo(box, attack)
    py = system_python()
    doc = job_doc(repo, main, head, looks=[3, 4])
    pin_model(doc, box)
    doc.update(build_argv=[py, "build.py"], cache_dir=str(box / "cache"),
               sandbox={"user": SANDBOX_USER},
               artifacts=["build/engine.py", "build/speed.json", "build/score.py",
                          "build/attack.json"])
    doc["runs"][0]["argv"][0] = py
    if correctness:
        reflog = box / "reference.log"  # root's, outside everything the sandbox reaches
        ref = box / "reference.py"
        ref.write_text(SCORER)
        doc["correctness"] = {
            "score_argv": [py, "{build}/build/score.py", "{tokens}", "{out}", "{topk}"],
            "reference_argv": [sys.executable, str(ref), "{tokens}", "{out}", "{topk}",
                               str(reflog)],
            "seed": 3, "windows": 4, "window_tokens": 16, "topk": 2, "critical": [2.5],
            "timeout_s": 60.0}
    jobdir.mkdir(parents=True)
    return doc, jobdir


def _snapshot(box: Path) -> dict[str, str]:
    """Every file of the box outside the job's own directory and the harness's cache (which
    the harness itself fills), by content hash."""
    own = (box / "jobs" / "job1", box / "cache")
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(box.rglob("*"))
            if p.is_file() and not p.is_symlink() and not any(d in p.parents for d in own)
            and p.name != "reference.log"}


def _run(doc: dict, jobdir: Path) -> dict[str, Any]:
    try:
        return run_job(parse_job(doc), jobdir)
    finally:
        sandbox._active = None


PLANTED = ("usercustomize.py", "sitecustomize.py", "evil.pth", "evalbot-attack-state*")


def _sandbox_leftovers() -> list[str]:
    """What the attack left in the box's shared temporary directories (other sandboxed tests
    of this machine may own files there too: only the attack's names count)."""
    names = [arg for name in PLANTED for arg in ("-name", name, "-o")][:-1]
    found = subprocess.run(["find", "/tmp", "/var/tmp", "/dev/shm", "-xdev", "-user", SANDBOX_USER,
                            "(", *names, ")"], capture_output=True, text=True, check=False)
    return found.stdout.split()


def _processes_of(user: str, box: Path) -> list[int]:
    """Live processes of `user` started from this box (other tests of this machine may run
    sandboxed processes of their own meanwhile)."""
    uid = pwd.getpwnam(user).pw_uid
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z") \
                and str(box) in cmdline:
            out.append(int(pid))
    return out


def _values(results: dict[str, Any], side: str) -> list[float]:
    return [s["value"] for c in results["cells"] if c["metric"] == "decode"
            for s in c["samples"] if s["side"] == side]


def _top1(corr: dict[str, Any], side: str) -> float:
    """The side's share of positions where its argmax is the reference's."""
    return sum(c[f"{side}_top1"] for c in corr["chunks"]) / sum(c["positions"]
                                                               for c in corr["chunks"])


def _assert_untouched(box: Path, before: dict[str, str]) -> None:
    assert _snapshot(box) == before  # the victim, other jobs, the store: unchanged
    assert not list((box / "cache").rglob("evil"))
    assert _sandbox_leftovers() == []
    assert _processes_of(SANDBOX_USER, box) == []


def test_code_planted_in_home_reaches_no_other_run(box: Path) -> None:
    """Attack 1: a build plants usercustomize.py / .pth everywhere; base's samples must run
    untouched, so the head (as fast as main) gets no tier."""
    doc, jobdir = _job(box, {"plant": PLANT})
    before = _snapshot(box)
    results = _run(doc, jobdir)
    _assert_untouched(box, before)
    assert results["failures"] == []
    base = _values(results, "base")
    assert base and all(900 < v < 1100 for v in base)  # never the planted 1 tok/s
    verdict = grade(results, POLICY)
    assert verdict["tier"] is None and verdict["kind"] != "improved"
    log = (jobdir / "logs" / "build-head.log").read_text()
    for spot in ("homes", "outputs", "inputs", "harness"):  # EROFS (OSError): read-only mount
        assert any(f"plant {jobdir / spot}/usercustomize.py: {error}" in log
                   for error in ("PermissionError", "OSError"))


def test_a_poisoned_reference_is_impossible(box: Path) -> None:
    """Attack 2: the planted code would make the reference score garbage and the cache would
    carry it to every later job. The reference runs as the harness, in its own HOME."""
    doc, jobdir = _job(box, {"plant": PLANT}, correctness=True)
    results = _run(doc, jobdir)
    assert results["failures"] == [], [f["message"] for f in results["failures"]]
    runs = [json.loads(line) for line in (box / "reference.log").read_text().splitlines()]
    assert runs and all(r["uid"] == os.getuid() and not r["hijacked"] for r in runs)
    assert all(Path(r["home"]).parent == jobdir.resolve() / "homes" for r in runs)
    corr = results["correctness"]
    assert corr is not None and not corr["identical"]
    assert _top1(corr, "base") == 1.0 and _top1(corr, "head") < 0.5  # main == reference
    cached = sorted((box / "cache" / "reference").rglob("*.json"))
    manifest = next(p for p in cached if p.name == "manifest.json")
    sums = json.loads(manifest.read_text())
    for entry in cached:
        if entry.name != "manifest.json":
            assert hashlib.sha256(entry.read_bytes()).hexdigest() == sums[entry.name]
            assert entry.stat().st_uid == os.getuid() and entry.stat().st_mode & 0o077 == 0
    # main's rows, cached for later evaluations against this build of main: main's own (no
    # planted code reached its run), and as unreadable by runs as the reference's
    mains = [p for p in (box / "cache" / "main-scores").rglob("*.json") if p.name != "manifest.json"]
    assert mains and corr["main_scores"] == {"cached": 0, "scored": len(mains)}
    for entry in mains:
        assert entry.stat().st_uid == os.getuid() and entry.stat().st_mode & 0o077 == 0
        assert any(row["argmax"] != 0 for row in json.loads(entry.read_text()))


@pytest.mark.parametrize("output", ["link_out", "fifo_out"])
def test_links_in_the_output_directories_redirect_nothing(box: Path, output: str) -> None:
    """Attack 3: links where the harness used to write (score/tokens-0.json) and read
    (score/base-0.json), and a score output that is a link (or a FIFO): no file outside the run
    changes, nothing of main's answers is copied, and the odd output is the PR's failure."""
    doc, jobdir = _job(box, {"links": True, output: True}, correctness=True)
    before = _snapshot(box)
    results = _run(doc, jobdir)
    _assert_untouched(box, before)
    assert (box / "victim").read_text() == "root's own file\n"
    [failure] = results["failures"]
    assert (failure["side"], failure["attribution"], failure["kind"]) == ("head", "pr", "crashed")
    assert "score output unreadable" in failure["message"]
    assert ("a link" if output == "link_out" else "not a regular file") in failure["message"]
    verdict = grade(results, POLICY)
    assert verdict["kind"] == "crashed" and verdict["tier"] is None


def test_main_s_answers_are_never_readable_by_the_head(box: Path) -> None:
    """Attack 3, second half: the head's scorer copies any score output it can find; it finds
    none, so it answers garbage and is not `identical` (inert)."""
    doc, jobdir = _job(box, {"links": True}, correctness=True)
    results = _run(doc, jobdir)
    corr = results["correctness"]
    assert results["failures"] == [] and corr is not None
    assert not corr["identical"] and _top1(corr, "head") < 0.5


def test_a_leaking_build_log_is_never_published(box: Path) -> None:
    """Attack 4: the failing build prints the box's coordinates (its port as sshd_config has
    it, the workdir in hex, base64 and letter-spaced) and the secrets; none is published."""
    workdir = str(box)
    leak = "\n".join([f"Port {BOX_PORT}", f"gpu1.internal:{BOX_PORT}", workdir.encode().hex(),
                      " ".join(workdir), __import__("base64").b64encode(workdir.encode()).decode(),
                      CANARY_TOKEN, CANARY_TOKEN[::-1], CANARY_TOKEN.encode().hex(), CANARY_HOOK])
    doc, jobdir = _job(box, {"leak": leak})
    results = _run(doc, jobdir)
    assert results["failures"][0]["kind"] == "build-failed"
    assert CANARY_TOKEN in results["failures"][0]["log_tail"]  # the operator keeps the tail
    verdict = graded(results, POLICY)  # as verdict.json and the store have it
    config = BoxConfig(name="gpu1", kind="ssh", workdir=workdir, repo="/srv/r",
                       host="gpu1.internal", port=BOX_PORT, user="evalbot")
    comment = render_comment(verdict, for_boxes([config], secrets=[CANARY_TOKEN, CANARY_HOOK]))
    published = [comment, json.dumps(verdict), *verdict["reasons"]]
    for canary in leak.splitlines():
        for text in published:
            assert canary not in text and canary.lower() not in text.lower()
    assert str(BOX_PORT) not in comment and "gpu1.internal" not in comment


def test_snooping_and_tampering_get_nothing(box: Path) -> None:
    """Other jobs, the store, the cache, both sides' artifacts: read or write, from the build
    and from every timed sample."""
    doc, jobdir = _job(box, {"snoop": True})
    before = _snapshot(box)
    results = _run(doc, jobdir)
    _assert_untouched(box, before)
    assert results["failures"] == []  # the artifacts verified intact before every sample
    logs = (jobdir / "logs" / "build-head.log").read_text()
    assert "allowed" not in logs
    assert CANARY_TOKEN not in logs and CANARY_HOOK not in logs


def test_a_head_that_knows_its_earlier_runs_gains_nothing(box: Path) -> None:
    """State left by one run (in HOME, /tmp, /dev/shm, the trees, a daemon that keeps writing
    it) would let later samples report double; no run ever finds any, and no daemon survives."""
    doc, jobdir = _job(box, {"daemon": True})
    before = _snapshot(box)
    results = _run(doc, jobdir)
    _assert_untouched(box, before)
    assert results["failures"] == []
    head = _values(results, "head")
    assert head and all(v == 1000.0 for v in head)  # never the doubled rate
    verdict = grade(results, POLICY)
    assert verdict["tier"] is None and verdict["kind"] != "improved"


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker", "--until-idle"],
                                     ["action"]])
def test_the_service_refuses_a_box_without_a_sandbox_user(tmp_path: Path, command: list[str]
                                                          ) -> None:
    """Attack 5: a local box marked trusted, no sandbox user (as the old docs showed): the PR
    would run as the bot and read its token from /proc. serve, worker and action refuse it."""
    config = tmp_path / "evalbot.yaml"
    config.write_text(f"profile: demo\nstore: {tmp_path / 'store.sqlite3'}\ngithub:\n"
                      "  repo: owner/engine\n  api_url: http://127.0.0.1:9\nboxes:\n"
                      f"  - {{name: gpu1, kind: local, workdir: {tmp_path / 'box'}, "
                      "trusted: true}\n")
    event = tmp_path / "event.json"
    event.write_text("{}")
    env = {**os.environ, "EVALBOT_GITHUB_TOKEN": CANARY_TOKEN, "GITHUB_TOKEN": CANARY_TOKEN,
           "EVALBOT_WEBHOOK_SECRET": CANARY_HOOK, "GITHUB_EVENT_NAME": "ping",
           "GITHUB_EVENT_PATH": str(event)}
    got = subprocess.run([sys.executable, "-m", "evalbot", *command, "--config", str(config)],
                         capture_output=True, text=True, timeout=120, env=env, check=False)
    assert got.returncode != 0
    assert "box gpu1 has no sandbox_user" in got.stderr
    assert not (tmp_path / "box").exists()  # nothing was run, nothing was made
    assert CANARY_TOKEN not in got.stderr + got.stdout
