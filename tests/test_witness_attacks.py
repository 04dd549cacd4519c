"""The two demo attacks of issue 29 graded in the production shape: a real sshd on loopback,
the sandbox user, `evaluate()` with an SSH box, the generated demo repository with the hostile
head as a commit on top of main, the cut demo profile (tests/demo_profile.py: decode@64 and its
`decode-64` witness: `clock: cpu`, a 64-id prompt, then 512 ids fed one a line, each only after
the previous EVALBOT_STEP answer was read).

Both hostile heads print twice their decode rate from `bench` (a lie: they decode at main's
speed) and run one repetition instead of --reps, so their sample processes end sooner than
main's by more than the lie claims: the samples' wall-time check (engine/measure/spoof.py) lets
the lie through, and only the witness stands between it and a tier.

- **The forking head**: its `witness` forks right after READY; the parent, the process the
  harness started, exits at once, and the orphan reads the ids, does every step at main's speed
  and answers. The per-run cgroup (engine/sandbox/cpu_meter.py) counts the orphan.
- **The batching head**: after the prompt's answer its `witness` reads ahead for every decode
  id, to run the 512 steps as one batched forward pass (given all 576 ids up front, it takes
  0.26 CPU-s a whole process against main's 0.74-1.08, its ids main's everywhere). They do
  not come: each is written only after the previous answer was read, so after 50 ms without
  one it decodes them one at a time, at main's speed.
- The demo's honest `faster` PR keeps its tier in the same shape.

Before the protocol of d40aa44 (at 9a174d2 the demo witness was `bench --ctxs 64
--decode-tokens 512 --reps 1 --tokens {prompt_json}`: all 576 ids in a file, its CPU time the
harness's RUSAGE_CHILDREN, which counts only the children it waited for), this module, with the
same two attacks moved into `bench` behind the witness's shape, failed both attack tests with
`eval:XL`, in 2 of 2 runs each on a 2-core box (figures: mean CPU-s per witness process):
- forking head (forking first thing in `bench`, before the model loads): +52.2% and +65.2%
  printed, confirmed at 3 pairs: head 0.173 / 0.186 against main's 1.224 / 1.277 (the witness
  "saved" 1.05 / 1.09 s, the rates claimed 0.26 / 0.30 s);
- batching head (its 512 forced ids in one forward pass): +109.1% and +91.9% printed,
  confirmed at 6 and 3 pairs: head 0.358 / 0.346 against main's 1.209 / 1.093, its ids main's
  at every position;
- `faster`: `eval:XL` in 2 runs, `eval:inconclusive` (its witness unconfirmed) in a third.
With this code, the cpu clock by the run's cgroup: the forking head `eval:inconclusive` in 2 of
2 runs (head 0.836 / 0.856 against main's 0.803 / 0.734 over 5 / 6 pairs: saving -0.03 /
-0.12 s, 0.27 / 0.24 s claimed), the batching head `eval:inconclusive` in 2 of 2 (0.799 / 0.791
against 0.765 / 0.730 over 3 / 6 pairs), `faster` `eval:XL` in 2 of 2, confirmed at 3 pairs
(0.472 / 0.624 against 0.996 / 0.927).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from evalbot.engine.demo import DemoRepo
from evalbot.engine.measure.witness import claimed_saving, full_pairs
from evalbot.evaluation.evaluate import Outcome
from evalbot.store.jobs import Store
from tests.demo_box import box_python, demo, evaluate_over_ssh
from tests.sshd import Sshd

__all__ = ["box_python", "demo"]  # fixtures

TIERS = ("eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS")
TIER_LABEL = re.compile(r"\beval(?:-[\w-]+)?:(?:XL|L|M|S|XS)(?![\w-])")
HEADLINE = {"spoofed": "eval:REJECT", "inconclusive": "eval:inconclusive"}
CELL = "tiny/decode@64"
WITNESS = "decode-64"

# Both heads' bench: one repetition (its sample processes end sooner than main's by more than
# the lie claims, so their wall time does not give it away), and twice the decode rate printed.
LYING_BENCH = [(
    "    result = {str(c): best_of(args.reps, model, ids[: c + args.decode_tokens], c,\n"
    "                              args.decode_tokens) for c in ctxs}\n",
    "    result = {str(c): best_of(1, model, ids[: c + args.decode_tokens], c,\n"
    "                              args.decode_tokens) for c in ctxs}\n"
    "    for r in result.values():\n"
    "        r[\"decode_tps\"] *= 2\n",
)]

# The forking head's witness: the process the harness started leaves right after READY; its
# orphan reads the ids and does every step.
FORKING_WITNESS = [
    ("import math\n", "import math\nimport os\n"),
    ('    print("EVALBOT_READY", flush=True)\n',
     '    print("EVALBOT_READY", flush=True)\n'
     "    if os.fork():  # the parent leaves at once, the orphan does the work\n"
     "        os._exit(0)\n"),
]

# The batching head's witness: after the prompt's answer it reads ahead for all its decode ids,
# to run them as one batched forward pass (teacher forcing); when 50 ms pass without another
# id, it decodes the ids one at a time after all. It reads stdin unbuffered, so ids a harness
# had written up front would all be its to batch.
BATCHING_WITNESS = [
    ("import math\n", "import math\nimport os\nimport select\n"),
    ("    line = sys.stdin.readline()\n", "    line = unbuffered_line()\n"),
    ("def step(logits: np.ndarray) -> None:\n",
     "PENDING = bytearray()  # stdin read but not yet used\n"
     "\n"
     "\n"
     "def unbuffered_line() -> str:\n"
     "    while b\"\\n\" not in PENDING:\n"
     "        chunk = os.read(0, 65536)\n"
     "        if not chunk:\n"
     "            break\n"
     "        PENDING.extend(chunk)\n"
     "    line, sep, rest = bytes(PENDING).partition(b\"\\n\")\n"
     "    PENDING[:] = rest\n"
     "    return (line + sep).decode()\n"
     "\n"
     "\n"
     "def read_ahead(n: int, wait_s: float) -> list[int]:\n"
     "    \"\"\"Up to n ids, one a line: those stdin holds, and any that come within wait_s.\"\"\"\n"
     "    while PENDING.count(b\"\\n\") < n and select.select([0], [], [], wait_s)[0]:\n"
     "        chunk = os.read(0, 65536)\n"
     "        if not chunk:\n"
     "            break\n"
     "        PENDING.extend(chunk)\n"
     "    return [int(unbuffered_line()) for _ in range(min(n, PENDING.count(b\"\\n\")))]\n"
     "\n"
     "\n"
     "def step(logits: np.ndarray) -> None:\n"),
    ("    for _ in range(args.steps):\n"
     "        step(model.forward(np.array(read_ids_line(1), dtype=np.int64), cache))\n",
     "    ahead = read_ahead(args.steps, 0.05)\n"
     "    if len(ahead) == args.steps:  # every step in one batched forward pass\n"
     "        for row in model.forward(np.array(ahead, dtype=np.int64), cache):\n"
     "            print(f\"EVALBOT_STEP {int(np.argmax(row))}\", flush=True)\n"
     "        return 0\n"
     "    for i in range(args.steps):  # they come one a step: one at a time after all\n"
     "        ids = ahead[i:i + 1] or read_ids_line(1)\n"
     "        step(model.forward(np.array(ids, dtype=np.int64), cache))\n"),
]


def _patched(source: str, blocks: list[tuple[str, str]]) -> str:
    for old, new in blocks:
        assert source.count(old) == 1, f"main's demo_engine.py changed: {old!r}"
        source = source.replace(old, new)
    return source


def _head(repo: DemoRepo, name: str, blocks: list[tuple[str, str]]) -> str:
    """A PR commit on top of main whose demo_engine.py is main's with `blocks` applied."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=attacker", "-c",
                               "user.email=attacker@evalbot.invalid", *args], cwd=repo.path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("checkout", "-q", "-b", f"pr/{name}", repo.main_sha)
    engine = repo.path / "demo_engine.py"
    engine.write_text(_patched(engine.read_text(), blocks))
    git("commit", "-q", "--no-gpg-sign", "-am", f"{name}: decode twice as fast")
    sha = git("rev-parse", "HEAD")
    git("checkout", "-q", "main")
    return sha


def _evaluate(sshd: Sshd, python: str, demo: tuple[Path, DemoRepo], tmp_path: Path,
              head_sha: str, pr: int) -> tuple[Outcome, dict[str, Any]]:
    outcome, _config = evaluate_over_ssh(sshd, python, demo, tmp_path, head_sha, pr)
    store = Store(tmp_path / "evalbot.sqlite3")
    try:
        assert [h["verdict"]["kind"] for h in store.history(repo="demo/engine")] == \
            [outcome.verdict["kind"]]
    finally:
        store.close()
    assert (tmp_path / "out" / "comment.md").read_text() == outcome.comment
    return outcome, json.loads((tmp_path / "out" / "private" / "results.json").read_text())


def _cell(verdict: dict[str, Any]) -> dict[str, Any]:
    [cell] = [c for c in verdict["cells"] if c["key"] == CELL]
    return cell


def _tier_labels(text: str) -> list[str]:
    """The tier labels in a text: the headline's (eval:M) and the model's (eval-demo:M)."""
    return sorted(set(TIER_LABEL.findall(text)))


def _assert_no_tier(outcome: Outcome) -> None:
    verdict = outcome.verdict
    assert verdict["tier"] is None and verdict["kind"] in ("spoofed", "inconclusive"), \
        (verdict["kind"], verdict["reasons"])
    assert verdict["headline"] == HEADLINE[verdict["kind"]]
    assert _tier_labels(" ".join(verdict["labels"])) == [], verdict["labels"]
    cell = _cell(verdict)
    assert cell["decision"] in ("spoofed", "unconfirmed") and cell["tier"] is None, cell
    assert cell["confirmation"] in ("contradicted", "unconfirmed"), cell["confirmation"]
    assert _tier_labels(outcome.comment) == [], outcome.comment[:2000]


def _witness(results: dict[str, Any]) -> dict[str, Any]:
    """The decode-64 witness's figures in results.json: per side its seconds, the claim."""
    [record] = [w for w in results["witnesses"] if w["name"] == WITNESS]
    [cell] = [c for c in results["cells"] if f"{c['model']}/{c['metric']}@{c['ctx']}" == CELL]
    pairs = full_pairs(record["samples"], need_verified=True)
    [tokens] = record["cells"].values()
    claim = claimed_saving(cell["samples"], int(tokens))
    assert claim is not None
    return {"clock": record["clock"], "stopped": record["stopped"], "pairs": len(pairs),
            "base_s": float(np.mean([p["base"]["seconds"] for p in pairs])) if pairs else None,
            "head_s": float(np.mean([p["head"]["seconds"] for p in pairs])) if pairs else None,
            "saving_s": float(np.mean([p["base"]["seconds"] - p["head"]["seconds"]
                                       for p in pairs])) if pairs else None,
            "claimed_s": claim[0],
            "head_verified": all(s["verified"] for s in record["samples"]
                                 if s["side"] == "head" and not s["dropped"])}


def _assert_witness_saw_the_work(results: dict[str, Any]) -> None:
    """The witness ran to a judgeable record, the head's ids were main's (judged on its time,
    not refused for its output), and the head's seconds are not below main's by the claim."""
    w = _witness(results)
    assert w["clock"] in ("cpu", "handoff") and w["pairs"] >= 3 and w["head_verified"], w
    assert w["claimed_s"] > 0 and w["saving_s"] < w["claimed_s"], w


def test_forking_head_gets_no_tier(sshd, box_python, demo, tmp_path):
    _root, repo = demo
    head = _head(repo, "forking", LYING_BENCH + FORKING_WITNESS)
    outcome, results = _evaluate(sshd, box_python, demo, tmp_path, head, pr=29)
    _assert_no_tier(outcome)
    [record] = [w for w in results["witnesses"] if w["name"] == WITNESS]
    heads = [s for s in record["samples"] if s["side"] == "head" and not s["dropped"]]
    if heads and not any(s["verified"] for s in heads):
        # the sandbox ends a run as a whole (bubblewrap's --die-with-parent): the orphan dies
        # with the process the harness started, and no answer of the head's ever comes
        assert all(s["error"] for s in heads), heads
        return
    _assert_witness_saw_the_work(results)  # a sandbox that lets the orphan live: it is timed


def test_batching_head_gets_no_tier(sshd, box_python, demo, tmp_path):
    _root, repo = demo
    head = _head(repo, "batching", LYING_BENCH + BATCHING_WITNESS)
    outcome, results = _evaluate(sshd, box_python, demo, tmp_path, head, pr=30)
    _assert_no_tier(outcome)
    _assert_witness_saw_the_work(results)


def test_honest_faster_head_keeps_its_tier(sshd, box_python, demo, tmp_path):
    _root, repo = demo
    outcome, results = _evaluate(sshd, box_python, demo, tmp_path, repo.prs["faster"], pr=31)
    verdict = outcome.verdict
    assert verdict["kind"] == "improved", verdict["reasons"]
    assert verdict["headline"] in TIERS and verdict["headline"] == f"eval:{verdict['tier']}"
    assert verdict["headline"] in verdict["labels"]
    cell = _cell(verdict)
    assert cell["decision"] == "improved" and cell["confirmation"] == "confirmed", cell
    assert verdict["headline"] in outcome.comment
    w = _witness(results)
    assert w["pairs"] >= 3 and w["head_verified"] and w["saving_s"] > 0, w
