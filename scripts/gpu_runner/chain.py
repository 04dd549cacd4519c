"""The chain of one GPU run: its stages in order under one budget, each skipped when its marker
says it is done (a second `start` on a warm machine resumes), the summary rewritten after each.

The set-up stages are bash functions (scripts/gpu_stages.sh), each in a fresh bash that sees
exactly stage_env(); the warm-up and the evaluations are run from here. A set-up stage that fails
stops the chain; an evaluation that fails is recorded and the next one runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from gpu_runner import summary
from gpu_runner.catalogue import ISSUES, LLAMACPP, SPARKINFER, Evaluation
from gpu_runner.plan import Stage, stages

REF_SHA = "90e3f6adf8120749245a83e9d2bc25eecb9bb58013397b247a263b8c4d279220"
SANDBOX = "evalbot-sandbox"
BASH_STAGES = {"setup", "box", "model", "reference"}
SHIPPED = {SPARKINFER: "evalbot/profiles/sparkinfer.yaml", LLAMACPP: "evalbot/profiles/llamacpp.yaml"}


@dataclass(frozen=True)
class Config:
    run: str  # the issue whose run this is (catalogue.ISSUES)
    evaluations: tuple[Evaluation, ...]
    budget_s: int
    warm: bool  # warm the reference's whole grid before the first evaluation
    root: Path  # the checkout the chain runs from (its own copy on the device)
    work: Path  # state, logs and results; markers under work/done
    shared: Path
    python: str
    jobs: int
    ab_pairs: int = 6

    @property
    def engine(self) -> str:
        return self.evaluations[0].engine

    @property
    def synth(self) -> str:
        return ISSUES[self.run][1] or "random"

    def plan(self) -> list[Stage]:
        return stages(list(self.evaluations), self.warm)


def stage_env(cfg: Config) -> dict[str, str]:
    """Everything a bash stage may read (tests/test_gpu_scripts.py holds gpu_stages.sh to it)."""
    return {"ROOT": str(cfg.root), "W": str(cfg.work), "SHARED": str(cfg.shared), "PY": cfg.python,
            "ENGINE": cfg.engine, "SYNTH": cfg.synth, "SANDBOX": SANDBOX, "JOBS": str(cfg.jobs),
            # the 4-layer Qwen3.6 file, the 40-layer one (~21 GB): each only where an evaluation reads it
            "QWEN36": "1" if any(e.qwen36 and not e.qwen36_full for e in cfg.evaluations) else "0",
            "QWEN36_FULL": "1" if any(e.qwen36_full for e in cfg.evaluations) else "0",
            "REF_SHA": REF_SHA, "REF_KEY": f"src-{REF_SHA[:16]}",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/local/cuda/bin",
            "PYTHONPATH": "/tmp/site", "PYTHONUNBUFFERED": "1",
            **({"LD_LIBRARY_PATH": os.environ["LD_LIBRARY_PATH"]} if "LD_LIBRARY_PATH" in os.environ else {})}


def build_flags(cfg: Config) -> str:
    """llama.cpp's builds: each SHA in its own tree (the sandbox binds only the side's tree
    writable, so build.py's --shared-build, one tree across SHAs, cannot run there: a full build
    per SHA, ~3-5 min on 16 cores), with the reference's flags (flash attention off)."""
    return f"--backend cuda --cuda-arch 90 --jobs {cfg.jobs} --cmake-flag=-DGGML_CUDA_FA=OFF"


def profile_argv(cfg: Config, e: Evaluation) -> list[str]:
    sums = str(cfg.work / "log" / "models.sha256")
    shipped = str(cfg.root / SHIPPED[e.engine])
    env_file = cfg.work / "sandbox-env.txt"
    env = env_file.read_text().split() if env_file.is_file() else []
    if e.engine == LLAMACPP:
        flags = [f for f, on in (("--correctness", e.correctness), ("--depth-witnesses", e.depth_witnesses),
                                 ("--witness-aa", e.kind == "witness-aa"),
                                 ("--calibrate-from-aa", e.calibrate_from_aa)) if on]
        return ["llamacpp", shipped, sums, build_flags(cfg), *flags, *env]
    flags = [f for f, on in (("--correctness", e.correctness), ("--qwen36", e.qwen36),
                             ("--qwen36-full", e.qwen36_full), ("--no-witnesses", not e.witnesses),
                             ("--long-run", e.long_run), ("--speed-cut", e.speed_cut),
                             ("--stable", cfg.synth == "stable"),
                             ("--calibrate-from-aa", cfg.synth == "stable" and e.name != "aa"),
                             (f"--{e.alone}-alone", bool(e.alone)),
                             (f"--pairs={e.pairs}", e.pairs > 0)) if on]
    return ["sparkinfer", shipped, sums, stage_env(cfg)["REF_KEY"], *flags, *env]


def eval_argv(cfg: Config, e: Evaluation, shas: dict[str, str], profile: Path) -> list[str]:
    return [cfg.python, str(cfg.root / "scripts/gpu_runner/evaluate.py"), "--repo", str(cfg.work / "repo"),
            "--base", shas[e.base], "--head", shas[e.head], "--profile", str(profile),
            "--models-dir", str(cfg.work / "models"), "--workdir", str(cfg.work / "box"),
            "--out", str(cfg.work / "eval" / e.name), "--sandbox-user", SANDBOX]


def calibrate_argv(cfg: Config, e: Evaluation, shas: dict[str, str], profile: Path) -> list[str]:
    """A witness A/A (scripts/gpu_runner/calibrate.py) of the base, in the evaluations' box."""
    return [cfg.python, str(cfg.root / "scripts/gpu_runner/calibrate.py"), "--repo", str(cfg.work / "repo"),
            "--sha", shas[e.base], "--profile", str(profile), "--models-dir", str(cfg.work / "models"),
            "--workdir", str(cfg.work / "box"), "--out", str(cfg.work / "eval" / e.name),
            "--sandbox-user", SANDBOX]


def read_shas(work: Path) -> dict[str, str]:
    """heads.env (NAME=SHA, NAME in capitals, '-' as '_') as branch -> SHA."""
    pairs = (line.split("=", 1) for line in (work / "heads.env").read_text().split())
    return {name.lower().replace("_", "-"): sha for name, sha in pairs}


class Chain:
    def __init__(self, cfg: Config) -> None:
        self.cfg, self.start = cfg, time.monotonic()
        self.env = {**os.environ, **stage_env(cfg)}  # the device's own (HOME, CUDA) and the run's
        for sub in ("done", "log", "eval", "profiles"):
            (cfg.work / sub).mkdir(parents=True, exist_ok=True)

    def left(self) -> int:
        return int(self.cfg.budget_s - (time.monotonic() - self.start))

    def note(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:6.0f}s] {text}"
        print(line, flush=True)
        with open(self.cfg.work / "timeline.txt", "a") as f:
            f.write(line + "\n")

    def record(self, name: str, state: str, seconds: float | None) -> None:
        path = self.cfg.work / "stages.json"
        got = json.loads(path.read_text()) if path.is_file() else {}
        got[name] = {"state": state, "seconds": None if seconds is None else round(seconds, 1)}
        path.write_text(json.dumps(got, indent=1))

    def sh(self, argv: list[str], log: Path, timeout: int, stdout: Path | None = None) -> int:
        """argv from the checkout, its stderr (and its stdout, unless given a file of its own) in log."""
        env = {**self.env, "PYTHONPATH": f"/tmp/site:{self.cfg.root}:{self.cfg.root / 'scripts'}"}
        with open(log, "w") as err, open(stdout, "w") if stdout else nullcontext(err) as out:
            # a group of its own: a stage cut by the budget takes its builds and samples with it,
            # none left running beside the next stage's measuring
            proc = subprocess.Popen(argv, cwd=self.cfg.root, env=env, stdout=out, stderr=err,
                                    start_new_session=True)
            try:
                return proc.wait(timeout=max(timeout, 1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                err.write(f"\ncut by the chain's budget after {timeout}s\n")
                return 124

    def run(self) -> int:
        names = " ".join(s.name for s in self.cfg.plan())
        self.note(f"run {self.cfg.run}: {names}; budget {self.cfg.budget_s}s")
        failed = 0
        for stage in self.cfg.plan():
            marker = self.cfg.work / "done" / stage.name.replace(":", "-")
            if marker.exists():
                self.note(f"{stage.name}: done earlier, skipped")
                continue
            if self.left() < stage.min_s:
                self.note(f"{stage.name}: not started, {self.left()}s left of the budget")
                self.record(stage.name, "not started: budget spent", None)
                continue
            t0 = time.monotonic()
            self.note(f"{stage.name}: start")
            rc = self.stage(stage)
            seconds = time.monotonic() - t0
            self.note(f"{stage.name}: rc={rc} in {seconds:.0f}s")
            self.record(stage.name, "done" if rc == 0 else f"failed rc={rc}", seconds)
            self.summarise()
            if rc == 0:
                marker.touch()
                continue
            failed += 1
            if not stage.name.startswith("eval:"):
                self.note(f"stopping: {stage.name} failed (log/stage-{stage.name}.txt)")
                break
        self.note("end")
        return 1 if failed else 0

    def summarise(self) -> None:
        """summary.json and summary.md, in a process of their own: the box time is evalbot's code,
        importable only once the setup stage has installed the wheels."""
        names = ",".join(e.name for e in self.cfg.evaluations)
        self.sh([self.cfg.python, "-m", "gpu_runner", "summary", self.cfg.run, "--only", names,
                 "--work", str(self.cfg.work)], self.cfg.work / "log" / "summary.txt", 120)

    def stage(self, stage: Stage) -> int:
        log = self.cfg.work / "log" / f"stage-{stage.name.replace(':', '-')}.txt"
        if stage.name in BASH_STAGES:
            script = f". {self.cfg.root}/scripts/gpu_stages.sh && stage_{stage.name}"
            return self.sh(["bash", "-c", script], log, self.left())
        if stage.name == "warm":
            return self.warm(log)
        e = next(e for e in self.cfg.evaluations if f"eval:{e.name}" == stage.name)
        if e.kind == "sandbox-ab":
            script = f". {self.cfg.root}/scripts/gpu_stages.sh && stage_sandbox_ab {self.cfg.ab_pairs}"
            return self.sh(["bash", "-c", script], log, self.left())
        return self.evaluate(e, log)

    def profile(self, e: Evaluation, log: Path) -> Path | None:
        path = self.cfg.work / "profiles" / f"{e.name}.yaml"
        argv = [self.cfg.python, "-m", "gpu_runner.profiles", *profile_argv(self.cfg, e)]
        if self.sh(argv, log, 60, stdout=path) != 0:
            return None
        check = [self.cfg.python, "-c", "import sys; from evalbot.evaluation.profile import load_profile; "
                 "load_profile(sys.argv[1])", str(path)]
        return path if self.sh(check, log.with_suffix(".check.txt"), 60) == 0 else None

    def warm(self, log: Path) -> int:
        e = next(e for e in self.cfg.evaluations if e.correctness)
        profile = self.profile(e, log.with_suffix(".profile.txt"))
        if profile is None:
            return 1
        argv = [self.cfg.python, str(self.cfg.root / "scripts/gpu_runner/warm.py"), "--profile", str(profile),
                "--models-dir", str(self.cfg.work / "models"), "--workdir", str(self.cfg.work / "box"),
                "--batch", "64"]
        return self.sh(argv, log, self.left())

    def evaluate(self, e: Evaluation, log: Path) -> int:
        profile = self.profile(e, log.with_suffix(".profile.txt"))
        if profile is None:
            return 1
        folder = self.cfg.work / "eval"
        # a witness A/A prints its floors (and writes them under eval/NAME/), an evaluation its verdict
        aa = e.kind == "witness-aa"
        make, stdout = (calibrate_argv, "floors.txt") if aa else (eval_argv, "verdict.json")
        argv = make(self.cfg, e, read_shas(self.cfg.work), profile)
        rc = self.sh(argv, folder / f"{e.name}.stderr", self.left(), stdout=folder / f"{e.name}.{stdout}")
        raw = summary.raw_results(folder / e.name)
        if raw is not None:
            shutil.copy(raw, folder / f"{e.name}.results.json")
        if (folder / e.name / "comment.md").is_file():
            shutil.copy(folder / e.name / "comment.md", folder / f"{e.name}.comment.md")
        return rc
