"""Hostile demo heads graded in the production shape (tests/demo_box.py: a real sshd on loopback,
the sandbox user, `evaluate()` with an SSH box, the cut demo profile with its `decode-64`
witness), and what their verdicts must show: the head as a commit on top of main whose
demo_engine.py is main's with replacement blocks applied."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from evalbot.engine.contract.shared.witness_interval import claimed_saving, full_pairs
from evalbot.engine.demo import DemoRepo
from evalbot.evaluation.evaluate import Outcome
from evalbot.store.jobs import Store
from tests.demo_box import evaluate_over_ssh
from tests.sshd import Sshd

TIERS = ("eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS")
TIER_LABEL = re.compile(r"\beval(?:-[\w-]+)?:(?:XL|L|M|S|XS)(?![\w-])")
HEADLINE = {"spoofed": "eval:REJECT", "inconclusive": "eval:inconclusive"}
CELL = "tiny/decode@64"
WITNESS = "decode-64"

# A lying bench: one repetition (its sample processes end sooner than main's by more than the
# lie claims, so their wall time does not give it away), and twice the decode rate printed.
LYING_BENCH = [(
    "    result = {str(c): best_of(args.reps, model, ids[: c + args.decode_tokens], c,\n"
    "                              args.decode_tokens) for c in ctxs}\n",
    "    result = {str(c): best_of(1, model, ids[: c + args.decode_tokens], c,\n"
    "                              args.decode_tokens) for c in ctxs}\n"
    "    for r in result.values():\n"
    "        r[\"decode_tps\"] *= 2\n",
)]


def patched(source: str, blocks: list[tuple[str, str]]) -> str:
    for old, new in blocks:
        assert source.count(old) == 1, f"main's demo_engine.py changed: {old!r}"
        source = source.replace(old, new)
    return source


def head(repo: DemoRepo, name: str, blocks: list[tuple[str, str]],
         file: str = "demo_engine.py") -> str:
    """A PR commit on top of main whose `file` is main's with `blocks` applied."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=attacker", "-c",
                               "user.email=attacker@evalbot.invalid", *args], cwd=repo.path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("checkout", "-q", "-b", f"pr/{name}", repo.main_sha)
    engine = repo.path / file
    engine.write_text(patched(engine.read_text(), blocks))
    git("commit", "-q", "--no-gpg-sign", "-am", f"{name}: decode twice as fast")
    sha = git("rev-parse", "HEAD")
    git("checkout", "-q", "main")
    return sha


def evaluate(sshd: Sshd, python: str, demo: tuple[Path, DemoRepo], tmp_path: Path,
             head_sha: str, pr: int) -> tuple[Outcome, dict[str, Any]]:
    """One evaluation; its verdict recorded once, its comment written as published."""
    outcome, _config = evaluate_over_ssh(sshd, python, demo, tmp_path, head_sha, pr)
    store = Store(tmp_path / "evalbot.sqlite3")
    try:
        assert [h["verdict"]["kind"] for h in store.history(repo="demo/engine")] == \
            [outcome.verdict["kind"]]
    finally:
        store.close()
    assert (tmp_path / "out" / "comment.md").read_text() == outcome.comment
    return outcome, json.loads((tmp_path / "out" / "private" / "results.json").read_text())


def cell(verdict: dict[str, Any]) -> dict[str, Any]:
    [found] = [c for c in verdict["cells"] if c["key"] == CELL]
    return found


def tier_labels(text: str) -> list[str]:
    """The tier labels in a text: the headline's (eval:M) and the model's (eval-demo:M)."""
    return sorted(set(TIER_LABEL.findall(text)))


def assert_no_tier(outcome: Outcome) -> None:
    verdict = outcome.verdict
    assert verdict["tier"] is None and verdict["kind"] in ("spoofed", "inconclusive"), \
        (verdict["kind"], verdict["reasons"])
    assert verdict["headline"] == HEADLINE[verdict["kind"]]
    assert tier_labels(" ".join(verdict["labels"])) == [], verdict["labels"]
    found = cell(verdict)
    assert found["decision"] in ("spoofed", "unconfirmed") and found["tier"] is None, found
    assert found["confirmation"] in ("contradicted", "unconfirmed"), found["confirmation"]
    assert tier_labels(outcome.comment) == [], outcome.comment[:2000]


def witness_figures(results: dict[str, Any]) -> dict[str, Any]:
    """The decode-64 witness's figures in results.json: per side its seconds, the claim."""
    [record] = [w for w in results["witnesses"] if w["name"] == WITNESS]
    [measured] = [c for c in results["cells"]
                  if f"{c['model']}/{c['metric']}@{c['ctx']}" == CELL]
    pairs = full_pairs(record["samples"], need_verified=True)
    [tokens] = record["cells"].values()
    claim = claimed_saving(measured["samples"], int(tokens))
    assert claim is not None

    def mean(side: str) -> float | None:
        return float(np.mean([p[side]["seconds"] for p in pairs])) if pairs else None

    return {"clock": record["clock"], "stopped": record["stopped"], "pairs": len(pairs),
            "base_s": mean("base"), "head_s": mean("head"),
            "saving_s": float(np.mean([p["base"]["seconds"] - p["head"]["seconds"]
                                       for p in pairs])) if pairs else None,
            "claimed_s": claim[0],
            "head_verified": all(s["verified"] for s in record["samples"]
                                 if s["side"] == "head" and not s["dropped"])}


def assert_witness_saw_the_work(results: dict[str, Any]) -> None:
    """The witness ran to a judgeable record, the head's ids were main's (judged on its time,
    not refused for its output), and the head's seconds are not below main's by the claim."""
    w = witness_figures(results)
    assert w["clock"] in ("cpu", "handoff") and w["pairs"] >= 3 and w["head_verified"], w
    assert w["claimed_s"] > 0 and w["saving_s"] < w["claimed_s"], w
