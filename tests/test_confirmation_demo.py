"""The demo engine printing twice its rates, through the real harness and the real grading: the
witness (the harness's own clock) must leave it without a tier. Its own module: the suite's
workers take modules one at a time, and this evaluation is the slowest of the confirmation
tests (tests/test_confirmation.py has the table tests and the stub engine's heads)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

from evalbot.engine.contract.job import parse_job
from evalbot.engine.contract.results import validate
from evalbot.engine.harness.steps import run_job
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from tests.demo_profile import cut_demo_profile

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = load_labels(ROOT / "labels.yaml").policy("default")
TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}


def test_demo_engine_printing_twice_its_rates_earns_no_tier(tmp_path):
    from evalbot.engine.demo.repo import generate
    from evalbot.evaluation.profile import load_profile

    demo = generate(tmp_path / "demo")
    repo = demo.path
    source = (repo / "demo_engine.py").read_text()
    marker = '    print("BENCH_JSON " + json.dumps(result), flush=True)\n'
    assert marker in source
    liar = source.replace(marker, '    for r in result.values():\n'
                                  '        r["decode_tps"] *= 2\n        r["prefill_tps"] *= 2\n'
                                  + marker)
    (repo / "demo_engine.py").write_text(liar)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qam",
                    "faster: print twice the rate"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()
    # the witnessed cell only (tests/demo_profile.py): the others cannot earn a tier anyway
    profile = load_profile(str(cut_demo_profile(tmp_path / "profile")))
    doc = _demo_job(profile, repo, demo.main_sha, head, demo.model_path)
    results = validate(run_job(parse_job(doc), tmp_path / "job"))
    verdict = grade(results, DEFAULT)
    assert verdict["tier"] is None and verdict["headline"] not in TIERS
    assert not any(c["decision"] == "improved" for c in verdict["cells"])


def _demo_job(profile: Any, repo: Path, base: str, head: str, model: Path) -> dict[str, Any]:
    from evalbot.config.settings import BoxConfig
    from evalbot.evaluation.jobspec import make_job

    box = BoxConfig(name="local", kind="local", repo=str(repo), models_dir=str(model.parent),
                    workdir=str(model.parent / "box"))
    job = make_job(profile, DEFAULT, box, base, head, seed=1)
    doc = copy.deepcopy(json.loads(job.to_json()))
    doc["correctness"] = None  # the speed verdict is what this test is about
    doc["sandbox"] = None
    return doc
