"""Issue 53 in the production shape: a real sshd on loopback, the sandbox user, `evaluate()` with
an SSH box and the whole shipped demo profile (every cell witnessed by the harness's driver,
`witness_every_cell`). The hostile head really does its prefill twice (each multi-token
`forward` runs once more on a scratch cache: its processes take far longer than main's) and its
bench prints prefill rates scaled to look like main's. Before, this head got `eval:none`, "no
speed change", correctness bit for bit (2 of 2 runs). Now the harness's witnesses time the
prefill both ways: the cell is not believed, and the headline is no better than
eval:inconclusive. The same head printing its rates honestly is REJECTed for the regression."""

from __future__ import annotations

import json

from tests import hostile_demo as hd
from tests.demo_box import box_python, demo, ssh_evaluator

__all__ = ["box_python", "demo"]  # fixtures

CELL = "tiny/prefill@1024"
NOT_UNCHANGED = ("eval:inconclusive", "eval:REJECT")

# a prefill (any batch of more than one id) computed twice: once on a scratch cache
TWICE = [(
    '    def forward(self, tokens: np.ndarray, cache: KVCache) -> np.ndarray:\n'
    '        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n',
    '    def forward(self, tokens: np.ndarray, cache: KVCache) -> np.ndarray:\n'
    '        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n'
    '        if tokens.shape[0] > 1 and cache.length == 0:\n'
    '            self.forward_once(tokens, self.new_cache(cache.capacity))\n'
    '        return self.forward_once(tokens, cache)\n\n'
    '    def forward_once(self, tokens: np.ndarray, cache: KVCache) -> np.ndarray:\n',
)]
# ... and the bench prints the prefill rate main would have
SCALED = [("        prefill_tps = ctx / (clock() - t0)\n",
           "        prefill_tps = 2 * ctx / (clock() - t0)\n")]


def test_a_prefill_slowed_twofold_behind_printed_rates_is_not_unchanged(sshd, box_python,
                                                                       demo, tmp_path):
    _root, repo = demo
    hidden = hd.head(repo, "prefill-twice-scaled", TWICE + SCALED)
    with ssh_evaluator(sshd, box_python, demo, tmp_path, full_profile=True) as (run, _config):
        outcome = run(hidden, 53, "hidden")
    lying = outcome.verdict
    cells = {c["key"]: c for c in lying["cells"]}
    assert lying["headline"] in NOT_UNCHANGED, lying["reasons"]
    assert lying["tier"] is None
    assert cells[CELL]["decision"] in ("unconfirmed", "regressed", "spoofed"), cells[CELL]
    assert lying["correctness"]["decision"] != "reject"  # its model is main's: only speed lies
    if cells[CELL]["decision"] == "unconfirmed":
        assert any(CELL in r and "not believed" in r for r in lying["reasons"]), lying["reasons"]
    # every cell printed unchanged: the least work first (engine/measure/witness_plan.py
    # `order`), and once prefill-1024 settles its cell not believed, decode-1024 (512 unchanged
    # decode steps beside the same prefill: its last look of 33 pairs before) is not run
    results = json.loads((outcome.out / "private" / "results.json").read_text())
    names = [w["name"] for w in results["witnesses"]]
    assert names.index("prefill-1024") < names.index("decode-1024"), names
    prefill, wide = (results["witnesses"][names.index(n)] for n in ("prefill-1024", "decode-1024"))
    # settled as slower than printed, or its printed rates contradicted: either way not needed
    if prefill.get("settled_by") in ("slower", "contradicted"):
        assert wide["stopped"] == "not_needed" and not wide["samples"], wide
    else:  # measured to its last look: the grader judges it there, and the wider one runs
        assert wide["samples"], (prefill.get("settled_by"), wide)


def test_the_same_prefill_printed_honestly_is_the_regression_it_is(sshd, box_python, demo,
                                                                    tmp_path):
    # a test of its own (tests/conftest.py: OWN_SCOPE_MODULES), so that xdist runs the two
    # whole evaluations of this module side by side
    _root, repo = demo
    honest = hd.head(repo, "prefill-twice", TWICE)
    with ssh_evaluator(sshd, box_python, demo, tmp_path, full_profile=True) as (run, _config):
        printed = run(honest, 54, "honest").verdict
    assert printed["headline"] == "eval:REJECT", printed["reasons"]
    assert "regression-1k-pp" in printed["regression_labels"]
    # the regression settles the verdict: no witness runs (its box time would change nothing)
    assert {w["stopped"] for w in printed["witnesses"] if w["source"] == "witness"} == \
        {"not_needed"}
