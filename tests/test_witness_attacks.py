"""The demo attacks of issue 29 graded in the production shape: a real sshd on loopback, the
sandbox user, `evaluate()` with an SSH box, the generated demo repository with the hostile head
as a commit on top of main, the cut demo profile (tests/demo_profile.py: decode@64 and its
`decode-64` witness: the harness's driver, engine/demo/driver.py, `clock: cpu`, a 64-id prompt,
then 512 ids fed one a line, each only after the previous EVALBOT_STEP answer was read).

The hostile head prints twice its decode rate from `bench` (a lie: it decodes at main's speed)
and runs one repetition instead of --reps, so its sample processes end sooner than main's by
more than the lie claims: the samples' wall-time check (engine/measure/spoof.py) lets the lie
through, and only the witness stands between it and a tier.

- **The forking head**: in a witness (its stdin is the handoff's pipe), its `Model.forward`
  forks at the prompt, the first call after READY; the parent, the process the harness
  started, exits at once, and the orphan goes on with the driver's loop: it reads the ids, does
  every step at main's speed and answers. The per-run cgroup (engine/sandbox/cpu_meter.py)
  counts the orphan; the sandbox's PID namespace ends with the parent.
- The demo's honest `faster` PR keeps its tier in the same shape.

Issue 29's batching head (its own `witness` subcommand read ahead for all 512 decode ids, to
run them as one batch) has no subcommand to live in since the witness became the harness's
driver (issue 45): the driver reads one id line per step, and the harness writes each id only
after the previous answer was read (`tests/test_handoff.py` reads ahead in vain).

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
With the cpu clock by the run's cgroup and the PR's own `witness` subcommand: the forking head
`eval:inconclusive` in 2 of 2 runs (head 0.836 / 0.856 against main's 0.803 / 0.734 over 5 / 6
pairs: saving -0.03 / -0.12 s, 0.27 / 0.24 s claimed), the batching head `eval:inconclusive` in
2 of 2 (0.799 / 0.791 against 0.765 / 0.730 over 3 / 6 pairs), `faster` `eval:XL` in 2 of 2,
confirmed at 3 pairs (0.472 / 0.624 against 0.996 / 0.927).
"""

from __future__ import annotations

from tests import hostile_demo as hd
from tests.demo_box import box_python, demo

__all__ = ["box_python", "demo"]  # fixtures

# The forking head's forward: in a witness, the process the harness started leaves at the
# prompt (the driver's fourth forward: three warm-up calls come before READY); its orphan reads
# the ids and does every step.
FORKING_WITNESS = [
    ("import math\n", "import math\nimport os\nimport stat\n"),
    ("DTYPE = np.float32\n", "DTYPE = np.float32\nCALLS = [0]\n"),
    ('        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n',
     '        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n'
     "        CALLS[0] += 1\n"
     "        if CALLS[0] == 4 and stat.S_ISFIFO(os.fstat(0).st_mode):  # a witness's prompt\n"
     "            if os.fork():  # the parent leaves at once, the orphan does the work\n"
     "                os._exit(0)\n"),
]


def test_forking_head_gets_no_tier(sshd, box_python, demo, tmp_path):
    _root, repo = demo
    head = hd.head(repo, "forking", hd.LYING_BENCH + FORKING_WITNESS)
    outcome, results = hd.evaluate(sshd, box_python, demo, tmp_path, head, pr=29)
    hd.assert_no_tier(outcome)
    [record] = [w for w in results["witnesses"] if w["name"] == hd.WITNESS]
    heads = [s for s in record["samples"] if s["side"] == "head" and not s["dropped"]]
    if heads and not any(s["verified"] for s in heads):
        # the sandbox ends a run as a whole (bubblewrap's --die-with-parent): the orphan dies
        # with the process the harness started, and no answer of the head's ever comes
        assert all(s["error"] for s in heads), heads
        return
    hd.assert_witness_saw_the_work(results)  # a sandbox that lets the orphan live: it is timed


def test_honest_faster_head_keeps_its_tier(sshd, box_python, demo, tmp_path):
    _root, repo = demo
    outcome, results = hd.evaluate(sshd, box_python, demo, tmp_path, repo.prs["faster"], pr=31)
    verdict = outcome.verdict
    assert verdict["kind"] == "improved", verdict["reasons"]
    assert verdict["headline"] in hd.TIERS and verdict["headline"] == f"eval:{verdict['tier']}"
    assert verdict["headline"] in verdict["labels"]
    cell = hd.cell(verdict)
    assert cell["decision"] == "improved" and cell["confirmation"] == "confirmed", cell
    assert verdict["headline"] in outcome.comment
    w = hd.witness_figures(results)
    assert w["pairs"] >= 3 and w["head_verified"] and w["saving_s"] > 0, w
