"""Correctness windows from the scored model's own tokenizer (correctness.tokenize_argv).

A stub tokenizer (2 corpus bytes per id, so ids are not bytes) and a stub scorer stand in for a
GGUF model's tools; everything between them is the real harness: token_stream, speed_tokens,
plan, score with its caches, run_job with its failure attribution.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evalbot.config.errors import ConfigError
from evalbot.config.settings import REPO_ROOT, BoxConfig
from evalbot.engine.contract.checks import ContractError
from evalbot.engine.contract.job import Job, parse_job
from evalbot.engine.demo import DemoRepo, generate
from evalbot.engine.harness.steps import run_job
from evalbot.engine.measure.gpu import device_identity
from evalbot.engine.scoring.correctness import plan, score
from evalbot.engine.scoring.long_corpus import long_text
from evalbot.engine.scoring.tokens import ScoreFailure, corpus_bytes, speed_tokens, token_stream
from evalbot.engine.sides.build import Built
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import correctness_drift
from evalbot.grading.policy import load_labels

# Reads the text, writes one id per 2 bytes (big-endian pairs), counts its runs in RUNS.
TOKENIZER = """import json, sys
text, out, runs = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(text, "rb").read()
with open(runs, "a") as f:
    f.write("run\\n")
json.dump([data[i] * 256 + data[i + 1] for i in range(0, len(data) - 1, 2)], open(out, "w"))
"""
# Writes OUT as a tokenizer that is broken in the way ARGV[2] names.
BROKEN = """import json, sys
out, how = sys.argv[1], sys.argv[2]
if how == "exit":
    sys.exit(3)
body = {"text": "not json", "empty": "[]", "string": '[1, "2", 3]', "negative": "[1, -2]",
        "object": '{"ids": [1, 2]}', "float": "[1, 2.5]"}[how]
open(out, "w").write(body)
"""
# Scores each window as if the next id were always certain; logs the windows it was asked.
SCORER = """import json, sys
tokens, out, topk, log, tag = sys.argv[1:6]
windows = json.load(open(tokens))
with open(log, "a") as f:
    f.write(json.dumps({"tag": tag, "windows": windows}) + "\\n")
rows = [{"top": [[[w[i + 1] + j, -0.1 - 4 * j] for j in range(int(topk))] for i in range(len(w) - 1)],
         "argmax": [w[i + 1] for i in range(len(w) - 1)]} for w in windows]
json.dump({"windows": rows}, open(out, "w"))
"""


def _pairs(data: bytes) -> list[int]:
    return [data[i] * 256 + data[i + 1] for i in range(0, len(data) - 1, 2)]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    return generate(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def scripts(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, body in (("tok", TOKENIZER), ("broken", BROKEN), ("score", SCORER)):
        out[name] = tmp_path / f"{name}.py"
        out[name].write_text(body)
    return out


def _job(demo: DemoRepo, tmp_path: Path, tokenize_argv: list[str], job_id: str = "j1") -> Job:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path / "box"),
                    repo=str(demo.path), models_dir=str(demo.model_path.parent), trusted=True,
                    python=sys.executable)
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    job = make_job(load_profile("demo"), policy, box, demo.main_sha, demo.prs["neutral"], seed=5,
                   job_id=job_id)
    assert job.correctness is not None
    # 2 long windows of 1024 ids and 18 short ones of 128 fit the stub's ~6.6k ids.
    spec = replace(job.correctness, tokenize_argv=tokenize_argv, looks=[10, 20],
                   critical=job.correctness.critical[:2],
                   drift=correctness_drift.rule([10, 20], {}, policy.correctness))
    return replace(job, correctness=spec)


def _stubbed(job: Job, scripts: dict[str, Path], log: Path) -> Job:
    assert job.correctness is not None
    argv = [sys.executable, str(scripts["score"]), "{tokens}", "{out}", "{topk}", str(log)]
    return replace(job, correctness=replace(job.correctness, score_argv=[*argv, "engine"],
                                            reference_argv=[*argv, "reference"]))


def _built(tmp: Path) -> dict[str, Built]:
    return {side: Built(side, "0" * 40, True, 0.0, False, tmp) for side in ("base", "head")}


def test_windows_and_speed_tokens_are_slices_of_the_tokenizer_ids(
        demo: DemoRepo, tmp_path: Path, scripts: dict[str, Path]) -> None:
    runs = tmp_path / "runs.txt"
    job = _job(demo, tmp_path, [sys.executable, str(scripts["tok"]), "{text}", "{out}", str(runs)])
    spec = job.correctness
    assert spec is not None
    text, corpus = corpus_bytes()
    ids = _pairs(text)
    jobdir = tmp_path / "job"
    jobdir.mkdir()
    tokens = json.loads(speed_tokens(jobdir, job, REPO_ROOT).read_text())
    assert tokens == ids and len(ids) == len(text) // 2
    stream = token_stream(job, jobdir, REPO_ROOT)
    assert stream.ids == ids
    assert stream.version.startswith(f"{corpus}/") and len(stream.version) > len(corpus) + 8
    assert stream.long_ids == _pairs(long_text(text)[0])  # long windows: the long text's ids
    windows = plan(spec, stream.ids, stream.long_ids)
    assert len(windows) == 20 and {w.kind for w in windows} == {"long", "short"}
    for w in windows:
        size = spec.long_window_tokens if w.kind == "long" else spec.window_tokens
        source = stream.long_ids if w.kind == "long" else ids
        assert w.tokens == source[w.index * size: (w.index + 1) * size]
    assert max(t for w in windows for t in w.tokens) > 255  # ids, not bytes
    assert plan(replace(spec, seed=6), ids) != windows  # the seed still picks the windows
    # speed tokens and stream: one tokenizer run per text (corpus, long text), then the cache
    assert runs.read_text().count("run") == 2


def test_score_uses_the_ids_and_every_cache_follows_the_tokenizer(
        demo: DemoRepo, tmp_path: Path, scripts: dict[str, Path]) -> None:
    runs, log = tmp_path / "runs.txt", tmp_path / "scored.jsonl"
    tok = [sys.executable, str(scripts["tok"]), "{text}", "{out}", str(runs)]
    ids = _pairs(corpus_bytes()[0])
    long_ids = _pairs(long_text(corpus_bytes()[0])[0])

    # the pair tokenizer's ids need a model of 65,536 ids: dumps are checked against the
    # scored model's vocabulary (engine/scoring/vocab.py), and the demo model has 256
    header = json.dumps({"config": {"vocab_size": 65536}, "tensors": []}).encode()
    pairs_model = tmp_path / "pairs.evdm"
    pairs_model.write_bytes(b"EVDM" + len(header).to_bytes(4, "little") + header)

    def evaluate(argv: list[str], job_id: str) -> dict[str, Any]:
        job = _stubbed(_job(demo, tmp_path, argv, job_id), scripts, log)
        job = replace(job, models=[replace(m, path=str(pairs_model)) for m in job.models])
        jobdir = tmp_path / job_id
        jobdir.mkdir()  # as run_job makes it
        speed_tokens(jobdir, job, REPO_ROOT)
        return score(job, _built(tmp_path), jobdir, REPO_ROOT, device=device_identity())

    first = evaluate(tok, "j1")
    assert first["identical"] and first["stopped"] == "identical"
    scored = [json.loads(line) for line in log.read_text().splitlines()]
    refs = [s for s in scored if s["tag"] == "reference"]
    assert {len(w) for s in refs for w in s["windows"]} == {128, 1024}  # every grid window once
    for s in scored:  # what the reference and both sides scored are slices of the ids
        for w in s["windows"]:
            size = len(w)
            source = long_ids if size == 1024 else ids  # long windows: the long text's ids
            assert any(source[k * size:(k + 1) * size] == w for k in range(len(source) // size))
    second = evaluate(tok, "j2")  # a second job on the same box: both caches are reused
    assert second["corpus_version"] == first["corpus_version"]
    assert runs.read_text().count("run") == 2  # corpus and long text, each once
    assert len([json.loads(x) for x in log.read_text().splitlines()
                if json.loads(x)["tag"] == "reference"]) == len(refs)
    other = evaluate([*tok, "--variant"], "j3")  # another recipe: new ids, new reference cache
    assert other["corpus_version"] != first["corpus_version"]
    assert other["corpus_version"].split("/")[0] == first["corpus_version"].split("/")[0]
    assert runs.read_text().count("run") == 4
    assert len([x for x in log.read_text().splitlines()
                if json.loads(x)["tag"] == "reference"]) == 2 * len(refs)


@pytest.mark.parametrize(("how", "message"), [
    ("exit", "tokenizer (correctness.tokenize_argv) crashed (exit 3)"),
    ("text", "tokenizer output unreadable"),
    ("empty", "not a non-empty JSON list"),
    ("object", "not a non-empty JSON list of token ids (got dict)"),
    ("string", "item 1 is '2', not a token id"),
    ("negative", "item 1 is -2, not a token id"),
    ("float", "item 1 is 2.5, not a token id"),
])
def test_a_broken_tokenizer_is_a_named_failure_never_bytes(
        demo: DemoRepo, tmp_path: Path, scripts: dict[str, Path], how: str, message: str) -> None:
    job = _job(demo, tmp_path, [sys.executable, str(scripts["broken"]), "{out}", how, "{text}"])
    with pytest.raises(ScoreFailure) as err:
        token_stream(job, tmp_path / "job", REPO_ROOT)
    assert message in err.value.message and err.value.side == "reference"
    assert not (tmp_path / "box" / "cache" / "tokens").exists() or \
        not list((tmp_path / "box" / "cache" / "tokens").glob("*.json"))


def test_the_harness_reports_a_broken_tokenizer_as_infra_at_score(
        demo: DemoRepo, tmp_path: Path, scripts: dict[str, Path]) -> None:
    job = _job(demo, tmp_path, [sys.executable, str(scripts["broken"]), "{out}", "string",
                                "{text}"])
    doc = run_job(job, tmp_path / "job")
    [failure] = doc["failures"]
    assert (failure["stage"], failure["attribution"], failure["kind"]) == \
        ("score", "infra", "infra-error")
    assert "tokenizer output item 1 is '2'" in failure["message"]
    assert doc["cells"] == [] and doc["correctness"] is None  # nothing timed on a wrong stream


def test_the_demo_tokenizer_gives_the_corpus_bytes(demo: DemoRepo, tmp_path: Path) -> None:
    box = BoxConfig(name="local", kind="local", workdir=str(tmp_path / "box"),
                    repo=str(demo.path), models_dir=str(demo.model_path.parent), trusted=True,
                    python=sys.executable)
    policy = load_labels(REPO_ROOT / "labels.yaml").policy("default")
    job = make_job(load_profile("demo"), policy, box, demo.main_sha, demo.prs["neutral"], seed=5)
    assert job.correctness is not None and job.correctness.tokenize_argv
    text, corpus = corpus_bytes()
    stream = token_stream(job, tmp_path / "job", REPO_ROOT)
    assert stream.ids == list(text)  # what the windows were before the tokenizer existed
    assert stream.version.startswith(f"{corpus}/")
    assert plan(job.correctness, stream.ids) == plan(job.correctness, text)
    bytes_only = replace(job, correctness=replace(job.correctness, tokenize_argv=[]))
    assert token_stream(bytes_only, tmp_path / "job", REPO_ROOT).version == corpus


@pytest.mark.parametrize(("printed", "ids"), [("9707 11 1879\n", [9707, 11, 1879]),
                                              ("9707 x\n", None), ("\n", None)])
def test_llamacpp_score_tokenize_mode_writes_the_tool_s_ids(tmp_path: Path, printed: str,
                                                           ids: list[int] | None) -> None:
    """engine/llamacpp/score.py --text: `TOOL tokenize MODEL TEXT` printed ids -> JSON list."""
    tool = tmp_path / "evalbot-topk"
    tool.write_text(f"#!/bin/sh\n[ \"$1\" = tokenize ] && [ -f \"$3\" ] || exit 9\n"
                    f"printf '{printed}'\n")
    tool.chmod(0o755)
    text, out = tmp_path / "corpus.txt", tmp_path / "ids.json"
    text.write_text("hello")
    done = subprocess.run([sys.executable, str(REPO_ROOT / "engine" / "llamacpp" / "score.py"),
                           "--bin", str(tool), "--model", "m.gguf", "--text", str(text),
                           "--out", str(out)], capture_output=True, text=True, check=False)
    if ids is None:
        assert done.returncode == 1 and "printed no ids or a non-id" in done.stderr
        assert not out.exists()
    else:
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text()) == ids


def test_tokenize_argv_takes_only_a_tokenizer_s_placeholders(tmp_path: Path) -> None:
    profile = (REPO_ROOT / "evalbot" / "profiles" / "demo.yaml").read_text()
    start = '  tokenize_argv: ["{python}", "-m", "engine.demo.reference", "tokenize", '
    assert start in profile
    bad = tmp_path / "bad.yaml"
    bad.write_text(profile.replace(start, start + '"{tokens}", '))
    with pytest.raises(ConfigError, match=r"tokenize_argv: placeholders \['tokens'\]"):
        load_profile(str(bad))
    bad.write_text(profile.replace('"--text", "{text}", ', ""))
    with pytest.raises(ConfigError, match="must read {text} and write {out}"):
        load_profile(str(bad))
    doc = json.loads(make_job(load_profile("demo"), load_labels(REPO_ROOT / "labels.yaml")
                              .policy("default"), BoxConfig(name="b", kind="local",
                                                            workdir=str(tmp_path), repo="r"),
                              "a" * 40, "b" * 40, seed=1).to_json())
    spec = parse_job(doc).correctness  # the job carries it to the harness
    assert spec is not None and spec.tokenize_argv[-1] == "{out}"
    doc["correctness"]["tokenize_argv"] = ["{python}", "{text}"]
    with pytest.raises(ContractError, match="needs {text} and {out}"):
        parse_job(doc)
