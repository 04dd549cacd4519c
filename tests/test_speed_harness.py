"""The harness's on-box decisions agree with `evalbot grade`'s recomputation, on real runs.

A tiny engine (a Python script in a temporary git repository, no torch) prints a BENCH_JSON
line with rates drawn from a seeded distribution; the job comes from a real profile file through
evalbot.evaluation.jobspec.make_job, runs through engine.harness.steps.run_job (checkout, build,
ABBA pairs, the on-box stopping rule), and is graded by evalbot.grading.grade.grade, whose replay
must agree.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import ConfigError, ResultsError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job, parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.contract.shared import replay
from evalbot.engine.harness.steps import run_job
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.service.calibrate import aa_noise, calibration_job, sick_cells
from evalbot.store.noise import NoiseStore
from tests.stub_engine import WITNESS

ROOT = Path(__file__).resolve().parents[1]
POLICY = load_labels(ROOT / "labels.yaml").policy("default")


# Each process draws its rates from a generator seeded by (the build's speed.json, how many
# samples this build has given so far): reproducible, and different from sample to sample.
ENGINE = WITNESS + r'''
import hashlib, json, os, random, sys, time
here = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open(os.path.join(here, "speed.json")))
if "--witness" in sys.argv:  # real CPU work at the true decode@4096 rate, one step per id
    witness(1 / (cfg["decode"] * cfg["effect"].get("decode@4096", 1.0)))
state = os.path.join(os.environ["STUB_STATE"], hashlib.sha256(json.dumps(cfg).encode()).hexdigest())
count = int(open(state).read()) if os.path.exists(state) else 0
open(state, "w").write(str(count + 1))
rng = random.Random(f"{cfg['seed']}-{count}")
ctxs = [int(c) for c in sys.argv[sys.argv.index("--ctxs") + 1].split(",")]
time.sleep(0.01)
def rate(metric, ctx):
    return cfg[metric] * cfg["effect"].get(f"{metric}@{ctx}", 1.0) * rng.lognormvariate(0, cfg["noise"])
out = {str(c): {"decode_tps": rate("decode", c), "prefill_tps": rate("prefill", c)} for c in ctxs}
print("BENCH_JSON " + json.dumps(out))
'''
BUILD = r'''
import os, shutil
os.makedirs("build", exist_ok=True)
shutil.copy("engine.py", "build/engine.py")
shutil.copy("speed.json", "build/speed.json")
'''
PARSE = ('{kind: json_line, prefix: "BENCH_JSON ", '
         'fields: {decode: "{ctx}.decode_tps", prefill: "{ctx}.prefill_tps"}}')
PROFILE = """
name: stub
build: {{argv: ["{{python}}", "build.py"], timeout_s: 60, artifacts: [build/engine.py, build/speed.json]}}
env: {{STUB_STATE: "{state}"}}
models:
  - {{name: m, file: /dev/null, sha256: "{zeros}", role: primary, namespace: eval-m}}
  - {{name: g, file: /dev/null, sha256: "{zeros}", role: guard, namespace: eval-g}}
speed:
  looks: [4, 8, 12]
  warmup: 1
  sd_floor: 0.01
  significance: 0.05
  tolerance: 0.05
  budget_s: 300
  witness_share: 10   # the stub's samples are tiny beside its witness (tests/test_witness_box_time.py)
  runs:
    - model: m
      argv: ["{{python}}", "{{build}}/build/engine.py", "--ctxs", "{{ctxs}}"]
      parse: {parse}
      decode_tokens: 4
      timeout_s: 30
      cells:
        - {{metric: decode, ctx: 128, anchor: 900.0}}
        - {{metric: decode, ctx: 4096}}
        - {{metric: prefill, ctx: 512}}
      witnesses:
        - {{name: decode-4k, argv: ["{{python}}", "{{build}}/build/engine.py", "--witness"],
           prompt_tokens: 16, steps: 600, output: {{kind: step_lines}}, output_tokens: 601,
           cells: {{"decode@4096": 600}}, pairs: 4, min_agreement: 1.0, clock: cpu}}
    - model: g
      argv: ["{{python}}", "{{build}}/build/engine.py", "--ctxs", "{{ctxs}}"]
      parse: {parse}
      decode_tokens: 4
      timeout_s: 30
      cells: [{{metric: decode, ctx: 128}}]
"""
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
MAIN = {"seed": 1, "decode": 1000.0, "prefill": 100000.0, "noise": 0.01, "effect": {}}
VARIANTS = {
    "faster": {"seed": 2, "effect": {"decode@4096": 1.4}},
    "neutral": {"seed": 3},
    "slower": {"seed": 4, "effect": {"prefill@512": 0.7}},
    "noisy": {"seed": 5, "noise": 0.15},
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, text=True,
                          capture_output=True).stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("stub") / "engine"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    (path / "engine.py").write_text(ENGINE)
    (path / "build.py").write_text(BUILD)
    (path / "speed.json").write_text(json.dumps(MAIN))
    _git(path, "add", "-A")
    _git(path, "commit", "-q", "-m", "main")
    shas = {"main": _git(path, "rev-parse", "HEAD")}
    for name, change in VARIANTS.items():
        _git(path, "checkout", "-q", "--detach", shas["main"])
        (path / "speed.json").write_text(json.dumps({**MAIN, **change}))
        _git(path, "commit", "-q", "-am", name)
        shas[name] = _git(path, "rev-parse", "HEAD")
    return path, shas


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    root = tmp_path_factory.mktemp("profile")
    (root / "state").mkdir()
    path = root / "stub.yaml"
    path.write_text(PROFILE.format(state=root / "state", zeros="0" * 64, parse=PARSE))
    return load_profile(str(path))


def _box(repo: Path, tmp: Path) -> BoxConfig:
    return BoxConfig(name="stubbox", kind="local", workdir=str(tmp / "box"), repo=str(repo),
                     trusted=True, python=sys.executable)


def _run(job: Job, tmp: Path) -> dict[str, Any]:
    job = parse_job(json.loads(job.to_json()))  # through the contract, as the box reads it
    return validate(json.loads(json.dumps(run_job(job, tmp / "jobs" / job.job_id))))


@pytest.fixture(scope="module")
def evaluated(repo: tuple[Path, dict[str, str]], profile: Profile,
              tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    """Each variant's evaluation against main, run once for the tests that read it (a copy
    each: a test may doctor its samples)."""
    path, shas = repo
    done: dict[str, dict[str, Any]] = {}

    def get(variant: str) -> dict[str, Any]:
        if variant not in done:
            tmp = tmp_path_factory.mktemp(f"evaluated-{variant}")
            done[variant] = _run(make_job(profile, POLICY, _box(path, tmp), shas["main"],
                                          shas[variant], job_id=variant), tmp)
        return copy.deepcopy(done[variant])

    return get


@pytest.mark.parametrize("variant,kind", [("faster", "improved"), ("neutral", "neutral"),
                                          ("slower", "regressed"), ("noisy", "inconclusive")])
def test_harness_decisions_agree_with_grade(evaluated: Callable[[str], dict[str, Any]],
                                            variant: str, kind: str) -> None:
    results = evaluated(variant)
    assert results["failures"] == []
    for record in results["cells"]:  # the replay reproduces every recorded look exactly
        replayed = [lk.to_dict() for lk in replay.replay(record, results["rule"])]
        assert replayed == record["looks"], replay.cell_key(record)
        orders = [[s["side"] for s in record["samples"] if s["pair"] == p] for p in range(2)]
        assert orders == [["base", "head"], ["head", "base"]]  # ABBA
    verdict = grade(results, POLICY)
    assert verdict["kind"] == kind
    cells = {c["key"]: c for c in verdict["cells"]}
    assert cells["m/decode@128"]["anchor"] == 900.0
    if kind == "improved":
        assert verdict["best_cell"] == "m/decode@4096"
    if kind == "regressed":
        assert verdict["regression_labels"] == ["regression-512-pp"]


def test_a_doctored_sample_breaks_the_replay(evaluated: Callable[[str], dict[str, Any]]) -> None:
    results = evaluated("faster")
    assert grade(results, POLICY)["kind"] == "improved"  # as measured, it replays
    cell = next(c for c in results["cells"] if c["metric"] == "decode" and c["ctx"] == 4096)
    for s in cell["samples"]:
        if s["side"] == "base":
            s["value"] *= 1.5  # the improvement vanishes, the recorded "improved" does not
    with pytest.raises(ResultsError, match="m/decode@4096"):
        grade(results, POLICY)


def test_calibrate_stores_the_noise_per_cell(repo: tuple[Path, dict[str, str]],
                                             profile: Profile, tmp_path: Path) -> None:
    path, shas = repo
    box = _box(path, tmp_path)
    job = calibration_job(profile, POLICY, box, shas["noisy"], pairs=8)
    assert job.base_sha == job.head_sha and job.rule.looks == [8]
    results = _run(job, tmp_path)
    noise = aa_noise(results)
    assert set(noise) == {"m/decode@128", "m/decode@4096", "m/prefill@512", "g/decode@128"}
    assert all(n == 8 for _, n in noise.values())
    # the variant draws each rate with a 15% log-sd: the sd of a difference is about 21%
    assert all(0.08 < sd < 0.45 for sd, _ in noise.values())
    assert sick_cells(results) == []
    store = NoiseStore(tmp_path / "evalbot.sqlite3")
    store.record(box.name, profile.name, shas["noisy"], noise)
    floors = store.floors(box.name, profile.name)
    store.close()
    assert floors == {k: sd for k, (sd, _) in noise.items()}
    later = make_job(profile, POLICY, box, shas["main"], shas["neutral"], sd_floors=floors)
    assert later.rule.sd_floors == floors


def test_calibrate_measures_each_witness_floor_for_later_jobs(
        repo: tuple[Path, dict[str, str]], profile: Profile, tmp_path: Path) -> None:
    # an A/A decides nothing improved, so its witnesses would not run: `witnesses` makes them
    path, shas = repo
    box = _box(path, tmp_path)
    job = calibration_job(profile, POLICY, box, shas["main"], pairs=6, witnesses=True)
    [spec] = [w for r in job.runs for w in r.witnesses]
    assert (spec.pairs, spec.looks, spec.sd_floor_s) == (6, (6,), 0.0)
    results = _run(job, tmp_path)
    noise = aa_noise(results)
    sd, n = noise["witness:decode-4k"]
    assert n == 6 and sd > 0
    store = NoiseStore(tmp_path / "evalbot.sqlite3")
    store.record(box.name, profile.name, shas["main"], noise)
    floors, df = store.floors(box.name, profile.name), store.degrees(box.name, profile.name)
    store.close()
    later = make_job(profile, POLICY, box, shas["main"], shas["faster"], sd_floors=floors,
                     floor_df=df)
    [witnessed] = [w for r in later.runs for w in r.witnesses]
    assert (witnessed.sd_floor_s, witnessed.floor_df) == (sd, 5)
    assert len(witnessed.pooled_stop_t) == len(witnessed.looks)  # pooled with the box's floor
    assert "witness:decode-4k" not in later.rule.sd_floors  # not a cell's log-ratio sd
    assert "witness:decode-4k" not in later.rule.calibrated


@pytest.mark.parametrize("sd", [0.0, float("nan"), -0.1])
def test_a_stored_witness_floor_that_is_no_measurement_is_named(
        repo: tuple[Path, dict[str, str]], profile: Profile, tmp_path: Path, sd: float) -> None:
    path, shas = repo
    with pytest.raises(ConfigError, match="witness decode-4k"):
        make_job(profile, POLICY, _box(path, tmp_path), shas["main"], shas["faster"],
                 sd_floors={"witness:decode-4k": sd})
