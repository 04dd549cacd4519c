"""The one GPU runner (scripts/gpu_run.sh, scripts/gpu_runner/), rehearsed on the CPU: each
issue's command plans its stages and the shared/ files it needs; a chain skips what is done,
stops at a failed set-up stage, records a failed evaluation and goes on, and starts nothing the
budget cannot hold; the summary is built from results files that ran on the GPU; every head
applies to the carried engine sources, and is a commit that touches only what it names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

from gpu_runner import heads, summary  # noqa: E402
from gpu_runner.__main__ import config, show_plan  # noqa: E402
from gpu_runner.catalogue import EVALUATIONS, ISSUES  # noqa: E402
from gpu_runner.chain import Chain, stage_env  # noqa: E402
from gpu_runner.plan import TREE_LIMIT, shared_needs  # noqa: E402

DATA = ROOT / "tests" / "data" / "sparkinfer"
CARRIED = [d for d in (ROOT / "shared", Path("/work/main/shared"))
           if (d / "sparkinfer-ba8add3.tar.gz").is_file() and (d / "llama.cpp-pruned.tar.gz").is_file()]

PLANS = {
    "49": ["setup", "box", "model", "eval:decode-b", "eval:deep-decode", "eval:liar-decode-105",
           "eval:liar-prefill-110"],
    "50": ["setup", "box", "model", "eval:lazy-prefill", "eval:qwen36-aa", "eval:qwen36-slow",
           "eval:aa-131k", "eval:sandbox-ab"],
    "51": ["setup", "box", "model", "reference", "warm", "eval:aa", "eval:broken-prefill",
           "eval:broken-long-prefill", "eval:bf16-reduction", "eval:honest-4k"],
    "52": ["setup", "box", "model", "reference", "eval:llama-aa", "eval:llama-speedup",
           "eval:llama-slow-prefill", "eval:llama-window-damage", "eval:llama-broken"],
    "53": ["setup", "box", "model", "eval:aa-speed", "eval:hide-decode", "eval:decode-cut",
           "eval:liar-cut"],
    "53L": ["setup", "box", "model", "eval:llama-witness-aa", "eval:llama-aa-53", "eval:llama-hide-prefill"],
    "53S": ["setup", "box", "model", "eval:aa-131k-floor", "eval:qwen36-aa-alone"],
    "53Q": ["setup", "box", "model", "eval:qwen36-full-aa"],
    "53O": ["setup", "box", "model", "eval:qwen36-offset"],
}
NEEDS = {
    "49": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py"},
    "50": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py",
           "old_sandbox_exec.py"},
    "51": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf",
           "llamacpp-reference.tar.xz", "llama.cpp-pruned.tar.gz"},
    "52": {"wheels", "debs", "llama.cpp-pruned.tar.gz", "ggml-vocab-qwen2.gguf", "synth_gguf.py",
           "llamacpp-reference.tar.xz"},
    "53": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py"},
    "53L": {"wheels", "debs", "llama.cpp-pruned.tar.gz", "ggml-vocab-qwen2.gguf", "synth_gguf.py"},
    "53S": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py"},
    "53Q": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py"},
    "53O": {"wheels", "debs", "sparkinfer-ba8add3.tar.gz", "ggml-vocab-qwen35.gguf", "synth_qwen35.py"},
}


@pytest.mark.parametrize("run", sorted(ISSUES))
def test_each_issue_s_command_plans_its_stages_and_files(run: str, tmp_path: Path) -> None:
    warm = ["--warm"] if run == "51" else []
    _, cfg, _ = config(["plan", run, *warm, "--work", str(tmp_path / "w")])
    assert cfg is not None
    assert [s.name for s in cfg.plan()] == PLANS[run]
    assert {p for p, _ in shared_needs(cfg.engine, list(cfg.evaluations), cfg.synth)} == NEEDS[run]
    # the issue's table, and nothing but it
    assert all(e.engine == cfg.engine for e in cfg.evaluations)


def test_the_correctness_run_scores_the_stable_file_and_the_speed_run_does_not() -> None:
    assert (ISSUES["51"][1], ISSUES["49"][1]) == ("stable", "random")
    assert all(EVALUATIONS[n].correctness for n in ISSUES["51"][0])
    assert not any(EVALUATIONS[n].correctness for n in ISSUES["49"][0])  # less its correctness section


@pytest.mark.parametrize("argv, problem", [
    (["plan", "51", "--only", "llama-aa"], "mixes"),
    (["plan", "49", "--only", "no-such-head"], "unknown evaluation"),
    (["plan", "49", "--warm"], "--warm"),
    (["plan", "50", "--budget-s", "0"], "positive"),
    (["plan"], "which run"),
])
def test_a_bad_command_is_refused_before_anything_runs(argv: list[str], problem: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        config(argv)
    assert exc.value.code == 2 and problem in capsys.readouterr().err


def test_the_dry_run_marks_what_is_done_and_shows_each_command(tmp_path: Path) -> None:
    _, cfg, _ = config(["plan", "52", "--work", str(tmp_path / "w")])
    assert cfg is not None
    (cfg.work / "done").mkdir(parents=True)
    for name in ("setup", "eval-llama-aa"):
        (cfg.work / "done" / name).touch()
    text, _ = show_plan(cfg)
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and
             line.split()[0] in PLANS["52"]}
    assert "done earlier, skipped" in lines["setup"] and "done earlier" in lines["eval:llama-aa"]
    assert "to run" in lines["box"] and "to run" in lines["eval:llama-broken"]
    assert "--base '$SLOW' --head '$MAIN'" in text  # the speedup: CUDA graphs off as the base
    # each SHA built in its own tree: the sandbox lets a build write its side's tree alone
    assert "--shared-build" not in text and "-DGGML_CUDA_FA=OFF" in text


def _shared(tmp: Path, sizes: dict[str, int]) -> Path:
    shared = tmp / "shared"
    for rel, size in sizes.items():
        path = shared / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)  # sparse: the size is what the plan reads
    return shared


def test_the_plan_lists_the_files_to_move_aside_and_the_64_mib_sum(tmp_path: Path) -> None:
    mib = 2**20
    shared = _shared(tmp_path, {"wheels/a.whl": 9 * mib, "debs/b.deb": 2 * mib,
                                "llama.cpp-pruned.tar.gz": 8 * mib, "ggml-vocab-qwen2.gguf": 6 * mib,
                                "synth_gguf.py": 3000, "llamacpp-reference.tar.xz": 28 * mib,
                                "ggml-vocab-qwen35.gguf": 6 * mib, "sparkinfer-ba8add3.tar.gz": mib})
    out = subprocess.run(["bash", str(SCRIPTS / "gpu_run.sh"), "plan", "52", "--shared", str(shared)],
                         capture_output=True, text=True, check=True).stdout
    assert "llamacpp-reference.tar.xz" in out and "28.0 MiB" in out
    aside = next(line for line in out.splitlines() if "move them aside" in line)
    assert "ggml-vocab-qwen35.gguf (6.0 MiB)" in aside and "sparkinfer-ba8add3.tar.gz" in aside
    assert "llama.cpp-pruned" not in aside and "OVER" not in out and "MISSING" not in out
    # a carried file too large for the device's copy is said, before any device time is spent
    # a plan that cannot run exits 1, so `start` stops before it copies or starts anything
    with open(shared / "llamacpp-reference.tar.xz", "wb") as f:
        f.truncate(TREE_LIMIT)
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_run.sh"), "plan", "52", "--shared", str(shared)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "OVER the limit" in done.stdout
    # without the carried reference the run can start: it builds the reference, and says so
    (shared / "llamacpp-reference.tar.xz").unlink()
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_run.sh"), "plan", "52", "--shared", str(shared)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "the reference stage builds it" in done.stdout
    (shared / "synth_gguf.py").unlink()
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_run.sh"), "plan", "52", "--shared", str(shared)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "MISSING under shared/: synth_gguf.py" in done.stdout


def _chain_root(tmp: Path, stages: str) -> Path:
    """A checkout whose stage library is `stages` (the chain under test is the real one)."""
    root = tmp / "root"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "gpu_runner").symlink_to(SCRIPTS / "gpu_runner")
    (root / "scripts" / "gpu_stages.sh").write_text(stages)
    return root


def _chain(root: Path, work: Path, budget: int) -> int:
    _, cfg, _ = config(["run", "49", "--work", str(work), "--budget-s", str(budget)])
    assert cfg is not None
    return Chain(replace(cfg, root=root)).run()


def test_a_chain_resumes_stops_at_a_failed_set_up_and_keeps_to_its_budget(tmp_path: Path) -> None:
    stages = ('stage_setup() { echo "$ENGINE $SYNTH $QWEN36 $REF_KEY" >> "$W/setup-runs"; }\n'
              'stage_box() { :; }\n'
              'stage_model() { [ -e "$W/model-ok" ]; }\n')
    root, work = _chain_root(tmp_path, stages), tmp_path / "w"
    assert _chain(root, work, 1000) == 1
    record = json.loads((work / "stages.json").read_text())
    assert record["model"]["state"] == "failed rc=1" and "eval:decode-b" not in record
    assert (work / "setup-runs").read_text() == "sparkinfer random 0 src-90e3f6adf8120749\n"
    assert "stopping: model failed" in (work / "timeline.txt").read_text()
    # resumed: setup and box are not run again; 100 s cannot start an evaluation (120 s)
    (work / "model-ok").touch()
    assert _chain(root, work, 100) == 0
    assert (work / "setup-runs").read_text().count("\n") == 1
    record = json.loads((work / "stages.json").read_text())
    assert record["model"]["state"] == "done"
    assert record["eval:decode-b"]["state"] == "not started: budget spent"
    # with budget: each evaluation runs; one that fails (no models' digests to pin: its
    # profile cannot be written) is recorded, and the next one still runs
    assert _chain(root, work, 1000) == 1
    record = json.loads((work / "stages.json").read_text())
    assert [record[f"eval:{n}"]["state"] for n in ISSUES["49"][0]] == ["failed rc=1"] * 4
    assert not (work / "done" / "eval-decode-b").exists()
    assert "No such file" in (work / "log" / "stage-eval-decode-b.profile.txt").read_text()
    made = json.loads((work / "summary.json").read_text())
    assert [r["headline"] for r in made["evaluations"]] == ["not run"] * 4 and not made["ok"]


def test_a_stage_cut_by_the_budget_takes_its_processes_with_it(tmp_path: Path) -> None:
    # the set-up stage starts a child that outlives the stage's own bash unless the chain
    # kills the stage's whole process group when the budget runs out
    stages = ('stage_setup() { sleep 300 & echo $! > "$W/child.pid"; wait; }\n')
    root, work = _chain_root(tmp_path, stages), tmp_path / "w"
    _, cfg, _ = config(["run", "49", "--work", str(work), "--budget-s", "31"])
    assert cfg is not None
    assert Chain(replace(cfg, root=root)).run() == 1
    record = json.loads((work / "stages.json").read_text())
    assert record["setup"]["state"] == "failed rc=124"
    stat = Path(f"/proc/{int((work / 'child.pid').read_text())}/stat")
    # gone, or dead and waiting for its reaper (a zombie: the state after the name is Z)
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", \
        "the stage's child survived its stage"


def _fixtures(tmp: Path) -> Path:
    folder = tmp / "eval"
    folder.mkdir()
    for src in (DATA / "verdict-cost-h100" / "aa", DATA / "verdict-cost-h100" / "prefill-4k",
                DATA / "accept-h100" / "broken-prefill"):
        for kind in ("results", "verdict"):
            shutil.copy(src.with_name(f"{src.name}.{kind}.json"), folder / f"{src.name}.{kind}.json")
    return folder


def test_the_summary_of_results_that_ran_on_the_gpu(tmp_path: Path) -> None:
    folder = _fixtures(tmp_path)
    stages = {"setup": {"state": "done", "seconds": 14.0}, "warm": {"state": "done", "seconds": 226.0}}
    evals = [EVALUATIONS["aa"], EVALUATIONS["prefill-4k"], EVALUATIONS["broken-prefill"],
             EVALUATIONS["bf16-reduction"]]
    made = summary.build(folder, evals, stages, "51")
    rows = {r["name"]: r for r in made["evaluations"]}
    # the figures the verdict-cost run printed on the H100 (verdict-cost-h100/summary.txt)
    aa = rows["aa"]
    assert (aa["headline"], aa["ok"]) == ("eval:none", True)
    assert {k: round(v) for k, v in aa["box_time_s"].items() if k in ("total", "builds", "measuring",
                                                                       "correctness_base")} == {
        "total": 267, "builds": 27, "measuring": 102, "correctness_base": 43}
    assert aa["correctness"]["seconds"] == {"reference": 0.205, "main": 42.754, "pr": 43.176}
    assert aa["correctness"]["grid"] == "warm" and aa["correctness"]["decision"] == "inert"
    short = aa["correctness"]["agreement"]["short"]
    assert short["positions"] == 3302 and round(short["main"], 3) == 0.050
    # against the verdict-cost issue's targets: the A/A's 267 s over its 240, its sides' 86 s
    # of correctness over 60; the honest head's 475 s within its 480
    assert aa["targets"] == ["total 267s OVER 240s", "correctness 86s OVER 60s"]
    assert rows["prefill-4k"]["targets"][0] == "total 475s <= 480s"
    assert (rows["prefill-4k"]["tier"], rows["prefill-4k"]["ok"]) == ("M", True)
    assert rows["prefill-4k"]["moved"] == ["qwythos-9b/prefill@4096 improved (confirmed)"]
    # the eps head that was not caught: the summary says it missed, not that it passed
    assert (rows["broken-prefill"]["headline"], rows["broken-prefill"]["ok"]) == ("eval:none", False)
    assert rows["broken-prefill"]["correctness"]["grid"] == "cold"
    assert rows["bf16-reduction"]["headline"] == "not run" and not made["ok"]
    table = summary.markdown(made)
    assert "| broken-prefill | eval:none | eval:REJECT | NO |" in table
    assert "| aa | eval:none | eval:none | yes |" in table and "0 / 43 / 43 (inert) | warm |" in table
    assert "| warm | done | 226 |" in table


@pytest.mark.parametrize("expected, verdict, ok", [
    ("tier", {"headline": "eval:M"}, True),
    ("tier", {"headline": "eval:none"}, False),
    ("no tier", {"headline": "eval:REJECT"}, True),
    ("no tier", {"headline": "eval:infra-error"}, False),
    ("neutral", {"headline": "eval:none", "cells": [{"key": "m/decode@0", "decision": "neutral"}]}, True),
    ("neutral", {"headline": "eval:none",
                 "cells": [{"key": "m/decode@0", "decision": "inconclusive"}]}, False),
    ("regressed:prefill@4096", {"headline": "eval:none", "cells": [
        {"key": "m/prefill@4096", "decision": "regressed"},
        {"key": "m/decode@0", "decision": "neutral"}]}, True),
    ("regressed:prefill@4096", {"headline": "eval:S", "cells": [
        {"key": "m/prefill@4096", "decision": "regressed"},
        {"key": "m/decode@0", "decision": "improved"}]}, False),
    ("pass", {"headline": "eval:none", "correctness": {"decision": "pass"}}, True),
    ("pass", {"headline": "eval:REJECT", "correctness": {"decision": "reject"}}, False),
    ("pass", {"headline": "eval:none"}, False),  # correctness not scored: nothing passed
    ("eval:REJECT", {"headline": "eval:REJECT"}, True),
    # issue 53: the hidden slowdown is caught only where the cell is not unchanged and the
    # headline is neither eval:none nor a tier
    ("caught:decode@128", {"headline": "eval:inconclusive", "cells": [
        {"key": "m/decode@128", "decision": "unconfirmed"}]}, True),
    ("caught:decode@128", {"headline": "eval:REJECT", "cells": [
        {"key": "m/decode@128", "decision": "regressed"}]}, True),
    ("caught:decode@128", {"headline": "eval:none", "cells": [
        {"key": "m/decode@128", "decision": "neutral"}]}, False),
    ("caught:decode@128", {"headline": "eval:none", "cells": [
        {"key": "m/decode@128", "decision": "unconfirmed"}]}, False),
    ("caught:decode@128", {"headline": "eval:S", "cells": [
        {"key": "m/decode@128", "decision": "spoofed"}]}, False),
])
def test_judge(expected: str, verdict: dict, ok: bool) -> None:
    assert summary.judge(expected, verdict) is ok


@pytest.mark.skipif(not CARRIED, reason="needs the carried engine tarballs (shared/)")
def test_every_head_applies_to_the_carried_sources_and_touches_only_what_it_names(tmp_path: Path) -> None:
    for engine, name in (("sparkinfer", "sparkinfer-ba8add3.tar.gz"),
                         ("llamacpp", "llama.cpp-pruned.tar.gz")):
        tree = tmp_path / engine
        with tarfile.open(CARRIED[0] / name) as tar:
            tar.extractall(tree, filter="data")
        assert heads.check(tree, engine) == []
    # the setup stage's repository, made by the stage's own bash with the run's settings
    _, cfg, _ = config(["plan", "51", "--work", str(tmp_path / "w"), "--shared", str(CARRIED[0])])
    assert cfg is not None
    (cfg.work / "log").mkdir(parents=True)
    env = {**stage_env(replace(cfg, root=ROOT)), "HOME": str(tmp_path), "GIT_CONFIG_GLOBAL": "/dev/null"}
    subprocess.run(["bash", "-c", ". scripts/gpu_stages.sh && engine_repository"], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    shas = dict(line.split("=") for line in (cfg.work / "heads.env").read_text().split())
    assert set(shas) == {"MAIN", *(h.upper().replace("-", "_") for h in heads.ENGINES["sparkinfer"])}
    assert len(set(shas.values())) == len(shas)
    repo = cfg.work / "repo"
    for branch, (_, edits) in heads.ENGINES["sparkinfer"].items():
        changed = heads.git(repo, "diff", "--name-only", "main", branch).split()
        assert sorted(changed) == sorted({rel for rel, _, _ in edits}), branch
    assert heads.git(repo, "rev-parse", "HEAD") == shas["MAIN"]  # left on main


@pytest.mark.parametrize("run, only", [(run, []) for run in sorted(ISSUES)]
                         + [("49", ["--only", "aa,decode-a"])])  # correctness on the random file
def test_each_evaluation_s_profile_is_the_shipped_one_with_what_it_names(run: str, only: list[str],
                                                                          tmp_path: Path) -> None:
    from gpu_runner.chain import profile_argv

    from evalbot.evaluation.profile import load_profile

    _, cfg, _ = config(["plan", run, *only, "--work", str(tmp_path / "w")])
    assert cfg is not None
    (cfg.work / "log").mkdir(parents=True)
    (cfg.work / "log" / "models.sha256").write_text(
        "".join(f"{c * 64}  {n}\n" for c, n in (("a", "qwythos-synth.gguf"),
                                                ("b", "qwen36-synth-4l.gguf"),
                                                ("d", "qwen36-synth.gguf"),
                                                ("c", "qwen3-0p6b-synth-f16.gguf"))))
    (cfg.work / "sandbox-env.txt").write_text("LD_LIBRARY_PATH=/usr/lib/wsl/lib\n")
    shipped = load_profile(cfg.engine)
    for e in cfg.evaluations:
        if e.kind == "sandbox-ab":
            continue
        path = tmp_path / f"{e.name}.yaml"
        with open(path, "w") as out:  # as the chain writes it
            subprocess.run([sys.executable, "-m", "gpu_runner.profiles", *profile_argv(cfg, e)], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": f"{ROOT}:{SCRIPTS}"}, stdout=out, check=True)
        p = load_profile(str(path))
        cells = {(r.model, c.metric, c.ctx) for r in p.runs for c in r.cells}
        assert (p.correctness is not None) is e.correctness, e.name
        assert p.env == {**shipped.env, "LD_LIBRARY_PATH": "/usr/lib/wsl/lib"}, e.name  # the box's env
        # the statistics as shipped (issue 53's llamacpp candidate: every cell witnessed; a floor's
        # samples: one look at its pairs)
        assert p.speed == replace(shipped.speed, witness_every_cell=e.depth_witnesses
                                  or shipped.speed.witness_every_cell,
                                  looks=(e.pairs,) if e.pairs else shipped.speed.looks), e.name
        if cfg.engine == "llamacpp":
            assert p.models[0].sha256 == "c" * 64 and "--cmake-flag=-DGGML_CUDA_FA=OFF" in p.build_argv
            assert cells == {(r.model, c.metric, c.ctx) for r in shipped.runs for c in r.cells}
            continue
        assert any(m == "qwen3.6-35b-a3b" for m, _, _ in cells) is e.qwen36, e.name
        assert any(ctx == 131072 for _, _, ctx in cells) is e.long_run, e.name
        # the Qwen3.6 file each reads, pinned: the 4-layer one, or the real shape's 40 layers
        assert {(m.name, m.file, m.sha256) for m in p.models if m.name == "qwen3.6-35b-a3b"} == (
            {("qwen3.6-35b-a3b", *(("qwen36-synth.gguf", "d" * 64) if e.qwen36_full
                                   else ("qwen36-synth-4l.gguf", "b" * 64)))} if e.qwen36 else set()), e.name
        # witnesses (the 131072 run has none as shipped), or none at all: the runs' samples alone
        assert any(r.witnesses for r in p.runs) is (e.witnesses and e.alone != "long"), e.name
        if e.alone:  # that run alone, as shipped (its cells, cost floor and, unless dropped, witnesses)
            alone = [r if e.witnesses else replace(r, witnesses=()) for r in shipped.runs
                     if (r.model == "qwen3.6-35b-a3b") is (e.alone == "qwen36")
                     and any(c.ctx == 131072 for c in r.cells) is (e.alone == "long")]
            assert len(alone) == 1 and list(p.runs) == alone, e.name
            assert [m.name for m in p.models] == [alone[0].model], e.name
        if e.correctness:
            assert p.correctness is not None
            stable = p.correctness.floors == shipped.correctness.floors  # type: ignore[union-attr]
            assert stable is (run == "51"), e.name  # the stable file: the shipped floors


@pytest.mark.parametrize("engine, options", [
    ("sparkinfer", {"qwen36_full": True}),  # the 40-layer file is the Qwen3.6 model's
    ("llamacpp", {"witnesses": False}),  # its witnesses are its candidate's (depth_witnesses)
])
def test_an_evaluation_asking_for_what_its_profile_lacks_is_refused(engine: str, options: dict) -> None:
    from gpu_runner.catalogue import Evaluation

    with pytest.raises(ValueError, match="qwen36_full needs qwen36, witnesses=False sparkinfer"):
        Evaluation("x", engine, "main", "aa", "measured", **options)
    Evaluation("x", "sparkinfer", "main", "aa", "measured", qwen36=True, **options)  # as 53Q's


def test_run_53q_gives_the_harness_qwen36_s_run_alone_on_its_40_layer_file(tmp_path: Path) -> None:
    """The job 53Q's evaluation makes: the shipped Qwen3.6 run alone (its seven cells and cost
    floor), its samples the only clock (no witness to run), 2 pairs forced, the 40-layer file pinned."""
    from gpu_runner.chain import profile_argv

    from bench import _simbox
    from evalbot.config.settings import BoxConfig
    from evalbot.evaluation.jobspec import make_job
    from evalbot.evaluation.profile import load_profile

    _, cfg, _ = config(["plan", "53Q", "--work", str(tmp_path / "w")])
    assert cfg is not None and [e.name for e in cfg.evaluations] == ["qwen36-full-aa"]
    (cfg.work / "log").mkdir(parents=True)
    (cfg.work / "log" / "models.sha256").write_text(f"{'a' * 64}  qwythos-synth.gguf\n"
                                                    f"{'d' * 64}  qwen36-synth.gguf\n")
    path = tmp_path / "53Q.yaml"
    with open(path, "w") as out:
        argv = [sys.executable, "-m", "gpu_runner.profiles", *profile_argv(cfg, cfg.evaluations[0])]
        subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT}:{SCRIPTS}"}, stdout=out,
                       check=True)
    shipped = next(r for r in load_profile("sparkinfer").runs if r.model == "qwen3.6-35b-a3b")
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path), repo=str(tmp_path))
    job = make_job(load_profile(str(path)), _simbox.POLICY, box, "a" * 40, "b" * 40)
    assert [(m.name, Path(m.path).name, m.sha256) for m in job.models] == [
        ("qwen3.6-35b-a3b", "qwen36-synth.gguf", "d" * 64)]
    (run,) = job.runs
    assert [(c.metric, c.ctx) for c in run.cells] == [(c.metric, c.ctx) for c in shipped.cells]
    assert run.witnesses == [] and run.cost_floor_s == shipped.cost_floor_s
    assert job.rule.looks == [2] and job.correctness is None


def test_start_and_wait_run_the_chain_detached_and_bring_back_its_summary(tmp_path: Path) -> None:
    # the device's two calls on the CPU: `start` checks the plan, copies the checkout, starts the
    # chain with setsid and waits; `wait` collects. shared/ here has every file the run reads but
    # no wheel in wheels/, so the chain's setup stage fails, as a device without them would.
    mib = 2**20
    shared = _shared(tmp_path, {"wheels/README": 10, "debs/b.deb": mib, "sparkinfer-ba8add3.tar.gz": mib,
                                "ggml-vocab-qwen35.gguf": mib, "synth_qwen35.py": 100})
    state, out = tmp_path / "state", tmp_path / "out"
    env = {**os.environ, "OUT": str(out)}
    base = ["bash", str(SCRIPTS / "gpu_run.sh")]
    refused = subprocess.run([*base, "start", "49", "--shared", str(tmp_path / "none"),
                              "--state", str(state)], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "MISSING under shared/" in refused.stdout
    assert not (state / "src").exists()  # nothing copied, nothing started
    started = subprocess.run([*base, "start", "49", "--only", "decode-b", "--shared", str(shared),
                              "--state", str(state), "--wait-s", "300"],
                             capture_output=True, text=True, env=env, timeout=600)
    assert "started run 49" in started.stdout and "chain ended" in started.stdout, started.stdout
    table = (out / "summary.md").read_text()
    assert "| setup | failed rc=1 |" in table and "| decode-b | not run | tier | NO |" in table
    assert "stopping: setup failed" in (out / "timeline.txt").read_text()
    with tarfile.open(out / "run-49.tgz") as tar:
        assert "./log/stage-setup.txt" in tar.getnames()
    assert (state / "src" / "scripts" / "gpu_run.sh").is_file()  # the chain ran from its own copy
    again = subprocess.run([*base, "wait", "--state", str(state), "--wait-s", "5"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert "chain ended" in again.stdout and "| decode-b | not run |" in again.stdout
