"""The runner's commands (scripts/gpu_run.sh calls them with scripts/ on PYTHONPATH):

    python3 -m gpu_runner plan RUN [OPTIONS]      the stages (done ones marked), each stage's
                                                  command, and the shared/ files the run needs
    python3 -m gpu_runner run RUN [OPTIONS]       the chain, in the foreground
    python3 -m gpu_runner summary RUN [OPTIONS]   summary.json and summary.md of the work folder
    python3 -m gpu_runner check-heads [--shared DIR]   every head against the carried tarballs

RUN is a run of catalogue.ISSUES (49, 50, 51, 52, 53, 53L, 53S, 53Q, 53O). OPTIONS: --only
NAME[,NAME...] (those evaluations of the same engine, in that order), --warm (warm the
reference's grid first), --budget-s S (the chain's budget; default the run's), --work DIR
(default /tmp/gpu-run/RUN), --shared DIR (default the checkout's shared/), --jobs N (default the
cores), --ab-pairs N (default 6).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path

from gpu_runner import heads, plan, summary
from gpu_runner.catalogue import ISSUES, evaluations_of
from gpu_runner.chain import BASH_STAGES, Chain, Config, calibrate_argv, eval_argv, profile_argv

ROOT = Path(__file__).resolve().parents[2]
TARBALLS = {"sparkinfer": "sparkinfer-ba8add3.tar.gz", "llamacpp": "llama.cpp-pruned.tar.gz"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpu_run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("plan", "run", "summary", "check-heads"))
    ap.add_argument("run", nargs="?", choices=sorted(ISSUES))
    ap.add_argument("--only", type=lambda s: [n for n in s.split(",") if n], default=None)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--budget-s", type=int, default=None)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--shared", type=Path, default=ROOT / "shared")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ab-pairs", type=int, default=6)
    return ap


def config(argv: list[str]) -> tuple[str, Config | None, argparse.Namespace]:
    """The command and the run's configuration, validated once: a bad name or value is an error
    that says what is wrong, before anything runs."""
    ap = parser()
    a = ap.parse_args(argv)
    if a.command == "check-heads":
        return a.command, None, a
    if a.run is None:
        ap.error(f"{a.command}: which run? one of {', '.join(sorted(ISSUES))}")
    try:
        evaluations = evaluations_of(a.run, a.only)
    except ValueError as exc:
        ap.error(str(exc))
    budget = ISSUES[a.run][2] if a.budget_s is None else a.budget_s
    if budget <= 0 or a.jobs <= 0 or a.ab_pairs < 2:
        ap.error("--budget-s and --jobs must be positive, --ab-pairs at least 2")
    if a.warm and not any(e.correctness for e in evaluations):
        ap.error("--warm: none of these evaluations scores correctness")
    work = (a.work or Path("/tmp/gpu-run") / a.run).resolve()
    return a.command, Config(a.run, tuple(evaluations), budget, a.warm, ROOT, work, a.shared.resolve(),
                             sys.executable, a.jobs, a.ab_pairs), a


def commands(cfg: Config) -> dict[str, str]:
    """What each stage runs, as the chain runs it (the dry run prints it)."""
    out = {}
    for stage in cfg.plan():
        if stage.name in BASH_STAGES:
            out[stage.name] = f"bash -c '. scripts/gpu_stages.sh && stage_{stage.name}'"
        elif stage.name == "warm":
            out[stage.name] = "python3 scripts/gpu_runner/warm.py --profile PROFILE --batch 64 ..."
        else:
            e = next(e for e in cfg.evaluations if f"eval:{e.name}" == stage.name)
            if e.kind == "sandbox-ab":
                out[stage.name] = f"bash -c '. scripts/gpu_stages.sh && stage_sandbox_ab {cfg.ab_pairs}'"
                continue
            shas = {b: f"${b.upper().replace('-', '_')}" for b in (e.base, e.head)}
            profile = cfg.work / "profiles" / f"{e.name}.yaml"
            write = f"python3 -m gpu_runner.profiles {shlex.join(profile_argv(cfg, e))} > {profile}; "
            run = calibrate_argv if e.kind == "witness-aa" else eval_argv
            out[stage.name] = write + shlex.join(run(cfg, e, shas, profile))
    return out


def show_plan(cfg: Config) -> tuple[str, bool]:
    """The dry run's text, and whether the run can start (its shared/ files there and fitting)."""
    done = cfg.work / "done"
    synth = f", the {cfg.synth} Qwythos file" if cfg.engine == "sparkinfer" else ""
    lines = [f"run {cfg.run}: {cfg.engine}{synth}"
             + f", budget {cfg.budget_s} s, warm {'yes' if cfg.warm else 'no'}, work {cfg.work}", "stages:"]
    cmds = commands(cfg)
    for stage in cfg.plan():
        state = "done earlier, skipped" if (done / stage.name.replace(":", "-")).exists() else "to run"
        lines += [f"  {stage.name:26s} {state:22s} {stage.what}", f"  {'':26s} $ {cmds[stage.name]}"]
    needs = plan.shared_needs(cfg.engine, list(cfg.evaluations), cfg.synth)
    report, ready = plan.shared_report(cfg.root, cfg.shared, needs)
    return "\n".join(lines + report) + "\n", ready


def check_heads(shared: Path) -> int:
    bad = 0
    for engine, name in TARBALLS.items():
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(shared / name) as tar:
                tar.extractall(tmp, filter="data")
            problems = heads.check(Path(tmp), engine)
        said = "; ".join(problems) or "every edit applies"
        print(f"{engine}: {len(heads.ENGINES[engine])} heads, {said}")
        bad += len(problems)
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    command, cfg, a = config(argv)
    if cfg is None:
        return check_heads(a.shared)
    if command == "plan":  # exit 1 where the run cannot start: `start` stops before any copy
        text, ready = show_plan(cfg)
        sys.stdout.write(text)
        return 0 if ready else 1
    if command == "summary":
        sys.stdout.write(summary.markdown(summary.write(cfg.work, list(cfg.evaluations), cfg.run)))
        return 0
    return Chain(cfg).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
