"""The publication rule (evalbot/report/publication.py) over real verdicts and results: the
GPU runs' results files graded as evalbot publishes them, the demo's, and tables of the
failures and texts a hostile head can shape. tests/test_publication_canary.py runs the rule end
to end on hostile heads in the production shape."""

from __future__ import annotations

import copy
import json
import math
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.audit.signing import SigningKey, key_id, sign_verdict, verify_verdict
from evalbot.config.redact import without_credentials
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.report.failure_text import failure_text, public_failure
from evalbot.report.numbers import round_text
from evalbot.report.public_results import public_results
from evalbot.report.publication import (
    CHANGE,
    PUBLISHED,
    graded,
    keep_raw,
    public_verdict,
    write_run,
)
from evalbot.report.render import render_comment

DATA = Path(__file__).parent / "data"
RESULTS = sorted([*DATA.glob("comments/*.results.json"),
                  *DATA.glob("sparkinfer/accept-h200/*.results.json"),
                  *DATA.glob("llamacpp/h200-*.results.json")])
POLICY = load_labels(REPO_ROOT / "labels.yaml").policy("default")
# Numbers of our own a published verdict keeps whole: main's levels, the profile's and the
# policy's figures, the rule, the box (verdict keys, at any depth where they are named).
OURS = {"base_median", "base_gmean", "sd_floor", "anchor", "rule", "box", "models", "floors",
        "margin", "kl_margin", "seed", "base"}


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _significant(x: float) -> int:
    return len(f"{abs(x):.15g}".split("e")[0].replace(".", "").strip("0"))


def _steered(doc: Any, where: str = "") -> list[tuple[str, float]]:
    """Every float of a verdict outside our own numbers, with where it is."""
    if isinstance(doc, dict):
        return [f for k, v in doc.items() if k not in OURS for f in _steered(v, f"{where}.{k}")]
    if isinstance(doc, list):
        return [f for i, v in enumerate(doc) for f in _steered(v, f"{where}[{i}]")]
    return [(where, doc)] if isinstance(doc, float) else []


@pytest.fixture(scope="module", params=RESULTS, ids=[p.name for p in RESULTS])
def pair(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """(raw results, the verdict as grading makes it) of one recorded evaluation."""
    results = _doc(request.param)
    return results, grade(results, POLICY)


def test_every_number_the_head_steers_has_three_significant_digits(pair):
    results, verdict = pair
    shown = public_verdict(verdict)
    assert [f for f in _steered(shown) if math.isfinite(f[1]) and _significant(f[1]) > 3] == []
    for raw, cell in zip(verdict["cells"], shown["cells"], strict=True):
        assert cell["head_median"] is None  # one head figure per cell: its level
        if raw["decision"] in ("spoofed", "unconfirmed"):
            assert cell["believed"] is False and cell["head_gmean"] is None
            assert all(cell.get(k) is None for k in CHANGE) and cell["compat"] is None
        elif raw["head_gmean"] is not None:
            assert cell["head_gmean"] == pytest.approx(raw["head_gmean"], rel=5e-3)
    for model in shown["provenance"]["models"]:
        assert "/" not in model["path"]  # the file's name, not the box's path


def test_the_rule_is_idempotent_and_keeps_a_signature_it_was_made_for(pair):
    _results, verdict = pair
    shown = public_verdict(verdict)
    assert public_verdict(shown) == shown
    private = Ed25519PrivateKey.generate()
    key = SigningKey(key_id(private.public_key()), private)
    signed = sign_verdict(shown, key)
    assert public_verdict(signed) == signed  # published again unchanged: still verifies
    keys = {key.key_id: private.public_key()}
    assert verify_verdict(public_verdict(signed), keys) == key.key_id
    if shown != verdict:  # a verdict signed before the rule loses a signature of other bytes
        assert "signature" not in public_verdict(sign_verdict(verdict, key))


def test_published_results_hold_main_s_samples_and_nothing_of_the_head_s(pair):
    results, _verdict = pair
    shown = public_results(results)
    assert public_results(shown) == shown
    text = json.dumps(shown)
    heads = {repr(s["value"]) for c in results["cells"] for s in c["samples"]
             if s["side"] == "head"}
    mains = {repr(s["value"]) for c in results["cells"] for s in c["samples"]
             if s["side"] == "base"}
    assert [v for v in heads - mains if v in text] == []
    assert all(s["value"] in {x["value"] for c in results["cells"] for x in c["samples"]
                              if x["side"] == "base"} for c in shown["cells"] for s in c["samples"])
    for witness in shown.get("witnesses") or []:
        assert set(witness) >= {"ran", "head_failed"} and "error" not in json.dumps(witness)
    assert "decode_argmax" not in text and all(f["log_tail"] == "" for f in shown["failures"])
    assert all("/" not in m["path"] for m in shown["models"])


def test_a_field_a_later_harness_adds_is_not_published() -> None:
    results = _doc(DATA / "comments" / "demo-faster.results.json")
    planted = copy.deepcopy(results)
    planted["head"]["stdout"] = "PLANTED-1"
    planted["cells"][0]["head_trace"] = "PLANTED-2"
    planted["cells"][0]["samples"][0]["note"] = "PLANTED-3"
    planted["correctness"]["head_dump"] = "PLANTED-4"
    planted["box"]["gpu_start"] = None
    assert "PLANTED" not in json.dumps(public_results(planted))


FAILURES = [
    # (stage, side, attribution, kind, message the harness recorded) -> published sentence
    ("speed", "head", "pr", "crashed", "exit status 57",
     "the PR's timed run failed or printed nothing the harness could read"),
    ("speed", "head", "pr", "crashed", "BENCH_JSON not found in 'ghp_SECRET 203.0.113.9'",
     "the PR's timed run failed or printed nothing the harness could read"),
    ("speed", "head", "pr", "spoofed", "rates imply 1.234567 s of work in a 0.500001 s process",
     "the PR's timed run printed rates that imply more seconds of work than its process ran, "
     "by the harness's clock"),
    ("score", "head", "pr", "crashed", "score run crashed (exit 57)",
     "the PR's score run failed or printed nothing the harness could read"),
    ("score", "head", "pr", "timeout", "score run timeout (exit -9)",
     "the PR's score run ran past its time limit"),
    ("build", "head", "pr", "build-failed", "head failed: build", "the PR's build failed"),
    # a sandbox cap the run went past: named, its size not (issue 45's exhaustion)
    ("build", "head", "pr", "build-failed", "head failed: its build wrote more than its disk "
     "cap of 16 MB", "the PR's build wrote more than its disk cap"),
    ("speed", "head", "pr", "crashed", "went past its memory cap of 1024 MB (its processes and "
     "its tmpfs together)", "the PR's timed run went past its memory cap"),
    # ... and a run that prints the harness's words with a number of its own publishes no digit
    ("speed", "head", "pr", "crashed", "BENCH_JSON not found in 'went past its memory cap of "
     "8675309 MB'", "the PR's timed run went past its memory cap"),
    ("build", "head", "pr", "timeout", "head failed: timeout",
     "the PR's build ran past its time limit"),
    ("build", "head", "infra", "infra-error", "head failed: build (the box's disk is full)",
     "the PR's build failed (the box's disk is full)"),
    ("checkout", "base", "infra", "infra-error", "base failed: checkout", "main's checkout failed"),
    ("build", "base", "infra", "infra-error", "base failed: timeout", "main's build timed out"),
    ("speed", "head", "infra", "infra-error", "artifact build/x changed: sha256 0f3a9",
     "the PR's timed run failed"),
    ("harness", "harness", "infra", "infra-error", "the harness failed",
     "the box, the connection or the harness failed"),
    ("harness", "harness", "infra", "infra-error",
     "the harness exited without writing its results (last step: speed): 'PR TEXT' "
     "(gave up after 3 attempts)",
     "the harness exited without writing its results (gave up after 3 attempts)"),
    ("harness", "harness", "infra", "infra-error",
     "grading failed (SignatureError): cannot encode 1.2345e+308",
     "grading failed (SignatureError)"),
    ("Speed 57", "elsewhere?", "pr", "exhausted", "whatever 57", "the PR's run failed"),
    ("build", "head", "pr", "disk-cap", "wrote 57 GB", "the PR's build failed"),
]


@pytest.mark.parametrize("stage,side,attribution,kind,message,sentence", FAILURES)
def test_a_failure_is_published_as_a_fixed_sentence(stage, side, attribution, kind, message,
                                                    sentence) -> None:
    failure = {"stage": stage, "side": side, "attribution": attribution, "kind": kind,
               "message": message, "log_tail": "Traceback: ghp_SECRET exit 57"}
    assert failure_text(failure) == sentence
    shown = public_failure(failure)
    assert shown["message"] == sentence and shown["log_tail"] == ""
    assert public_failure(shown) == shown  # published twice, the same


@pytest.mark.parametrize("text,rounded", [
    ("top-1 agreement fell 80.18 points (interval -84.19 to -76.16)",
     "top-1 agreement fell 80.2 points (interval -84.2 to -76.2)"),
    ("mean KL rose by 8.4369 against main, beyond 0.02", "mean KL rose by 8.44 against main, "
     "beyond 0.02"),
    ("best cell q/decode@128: +141.6% [+30.2%, +348.3%]", "best cell q/decode@128: +142% "
     "[+30.2%, +348%]"),
    ("p99 5.019017e-12 after 3062 tokens", "p99 5.02e-12 after 3062 tokens"),
    ("version 0.1.0, qwen3.5-9b, 1,024 tokens", "version 0.1.0, qwen3.5-9b, 1,024 tokens"),
])
def test_decimals_in_published_text_keep_three_digits(text, rounded) -> None:
    assert round_text(text) == rounded


def test_a_verdict_of_a_failure_says_its_sentence_everywhere() -> None:
    results = _doc(DATA / "comments" / "demo-faster.results.json")
    results["failures"] = [{"stage": "speed", "side": "head", "attribution": "pr",
                            "kind": "crashed", "message": "exit status 57",
                            "log_tail": "EVB-CANARY\n" * 50}]
    verdict = graded(results, POLICY)
    text = json.dumps(verdict) + render_comment(verdict, results=results)
    assert re.search(r"(exit|status|code)\D{0,3}57", text) is None
    assert "EVB-CANARY" not in text
    assert verdict["reasons"] == ["speed of the PR: the PR's timed run failed or printed "
                                  "nothing the harness could read"]


def test_a_run_folder_holds_the_published_files_and_its_raw_results_apart(tmp_path) -> None:
    results = _doc(DATA / "comments" / "demo-faster.results.json")
    verdict = graded(results, POLICY)
    write_run(tmp_path, verdict, render_comment(verdict, results=results), results)
    raw = keep_raw(tmp_path, "results.json", results)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(PUBLISHED)
    assert raw.parent.name == "private" and stat.S_IMODE(raw.parent.stat().st_mode) == 0o700
    assert json.loads((tmp_path / "results.json").read_text()) == public_results(results)
    assert json.loads((tmp_path / "verdict.json").read_text()) == verdict
    assert (tmp_path / "labels.txt").read_text().split() == verdict["labels"]


@pytest.mark.parametrize("url,kept", [
    ("https://x-access-token:ghs_S3CRET@github.com/o/r.git", "https://github.com/o/r.git"),
    ("https://ghp_S3CRET@github.com/o/r", "https://github.com/o/r"),
    ("ssh://git:S3CRET@host.example/r.git", "ssh://git@host.example/r.git"),
    ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ("/srv/engine", "/srv/engine"),
])
def test_job_json_carries_the_repository_without_credentials(url, kept) -> None:
    assert without_credentials(url) == kept
    box = BoxConfig(name="gpu1", kind="ssh", workdir="/srv/evalbot", repo=url,
                    models_dir="/srv/models", host="gpu1.example", user="evalbot")
    job = make_job(load_profile("demo"), POLICY, box, "a" * 40, "b" * 40)
    assert job.repo == kept and "S3CRET" not in job.to_json()
