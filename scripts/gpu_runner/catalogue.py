"""Every evaluation a GPU run makes, and which run (issue) makes which.

An evaluation is a base and a head of one engine's repository (branches the setup stage commits:
heads_sparkinfer.HEADS, heads_llamacpp.HEADS, and `main`), the verdict it must get, and the e2e
profile it runs with (profiles.py: the shipped profile, with or without its correctness section,
with or without the Qwen3.6 model (its 4-layer file, or the real shape's 40 layers), with or
without the 131072 run, with or without the runs' witnesses). `sandbox-ab` is the one
measurement that is not an `evalbot eval`: main's sweep through the bubblewrap sandbox and the
launcher before it, in alternating pairs (scripts/sandbox_ab.py).

What an evaluation must get (`expected`), as summary.judge reads it:
  eval:none, eval:REJECT       the verdict's headline;
  neutral                      eval:none with every cell neutral;
  tier                         one of the tier labels (eval:XS .. eval:XL);
  no tier                      no tier label, and not an infra-error;
  regressed:CELL               the cell CELL (e.g. prefill@4096) regressed, nothing improved;
  caught:CELL                  the cell CELL regressed or not believed, the headline neither
                               eval:none nor a tier (issue 53: a slowdown hidden by printing);
  pass                         correctness not REJECTed, no infra-error;
  measured                     any verdict that is not an infra-error (a figure, not a test).

`witness-aa` is an A/A of main that is not a verdict either: `evalbot calibrate --witnesses`'s job
(scripts/gpu_runner/calibrate.py) in the run's sandboxed box, whose witness floors the run's later
llamacpp profiles take (`calibrate_from_aa`, llama_witnesses.py).
"""

from __future__ import annotations

from dataclasses import dataclass

SPARKINFER, LLAMACPP = "sparkinfer", "llamacpp"
EXPECTATIONS = ("eval:none", "eval:REJECT", "neutral", "tier", "no tier", "pass", "measured")


@dataclass(frozen=True)
class Evaluation:
    name: str
    engine: str
    base: str
    head: str
    expected: str
    correctness: bool = False  # the profile keeps its correctness section (needs the reference)
    qwen36: bool = False  # sparkinfer: the 4-layer Qwen3.6 file as the second model, with its guard
    # sparkinfer, with qwen36: the 40-layer file (the real Qwen3.6-35B-A3B shape, ~21 GB at
    # q4_k_m) in the 4-layer one's place
    qwen36_full: bool = False
    long_run: bool = False  # sparkinfer: the shipped 131072 run kept (31 s a sample)
    speed_cut: bool = False  # sparkinfer: the sweep cut to its cells up to 4096 (a correctness test)
    # sparkinfer, for device time: "long" the 131072 run alone (Qwythos's sweep and its witnesses
    # out), "qwen36" Qwen3.6's run and witnesses alone (Qwythos's runs out)
    alone: str = ""
    # every run measures exactly this many kept pairs (speed.looks [pairs]): a floor's samples, not
    # the A/A's usual 2
    pairs: int = 0
    # sparkinfer: False drops every run's witnesses (device time: the runs' own samples alone, their
    # wall times and printed rates; an unwitnessed unchanged cell rests on its run's wall clock)
    witnesses: bool = True
    depth_witnesses: bool = False  # llamacpp: issue 53's candidate (llama_witnesses.py)
    calibrate_from_aa: bool = False  # llamacpp: the witness floors from the run's witness A/A
    # "eval": evalbot eval in the sandbox; "sandbox-ab": scripts/sandbox_ab.py; "witness-aa":
    # scripts/gpu_runner/calibrate.py
    kind: str = "eval"
    why: str = ""

    def __post_init__(self) -> None:
        if self.engine not in (SPARKINFER, LLAMACPP):
            raise ValueError(f"{self.name}: unknown engine {self.engine!r}")
        if self.expected not in EXPECTATIONS and not self.expected.startswith(("regressed:", "caught:")):
            raise ValueError(f"{self.name}: unknown expectation {self.expected!r}")
        if self.alone not in ("", "long", "qwen36") or (self.alone == "long" and not self.long_run) \
                or (self.alone == "qwen36" and not self.qwen36):
            raise ValueError(f"{self.name}: alone={self.alone!r} needs its run (long_run, qwen36)")
        if (self.qwen36_full and not self.qwen36) or (not self.witnesses and self.engine != SPARKINFER):
            raise ValueError(f"{self.name}: qwen36_full needs qwen36, witnesses=False sparkinfer")
        if self.pairs == 1 or self.pairs < 0:
            raise ValueError(f"{self.name}: pairs {self.pairs}: 0 (the profile's looks) or at least 2")
        if self.kind not in ("eval", "sandbox-ab", "witness-aa"):
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")


def _spk(name: str, base: str, head: str, expected: str, **kw: object) -> Evaluation:
    return Evaluation(name, SPARKINFER, base, head, expected, **kw)  # type: ignore[arg-type]


def _llama(name: str, base: str, head: str, expected: str, **kw: object) -> Evaluation:
    return Evaluation(name, LLAMACPP, base, head, expected, correctness=True, **kw)  # type: ignore[arg-type]


def _llama53(name: str, base: str, head: str, expected: str, **kw: object) -> Evaluation:
    """Issue 53's llamacpp candidate, speed only (no reference, no scoring: 100 s an evaluation),
    its witness floors from the run's A/A."""
    return Evaluation(name, LLAMACPP, base, head, expected, depth_witnesses=True,
                      calibrate_from_aa=True, **kw)  # type: ignore[arg-type]


EVALUATIONS: dict[str, Evaluation] = {e.name: e for e in [
    # sparkinfer's speed (issue 49 and the runs before it): no correctness section
    _spk("decode-a", "slow-decode", "main", "tier", correctness=True,
         why="main with the LM head twice per decode step -> main (+9% decode)"),
    _spk("decode-b", "slow-decode", "main", "tier", why="the same, without correctness: rule 2's witness"),
    _spk("deep-decode", "slow-deep-decode", "main", "tier",
         why="main with the LM head twice only at depth >= 32768 -> main"),
    _spk("prefill-4k", "slow", "main", "tier", why="int8 prefill projections only to 2048 -> main"),
    _spk("prefill-32k", "slow-attn-32k", "main", "tier", why="the batched attention twice above 8192"),
    _spk("liar-decode-105", "main", "liar-decode-105", "no tier", why="the bench prints decode x1.05"),
    _spk("liar-decode-110", "main", "liar-decode-110", "no tier", why="the bench prints decode x1.10"),
    _spk("liar-prefill-110", "main", "liar-prefill-110", "no tier", why="the bench prints prefill x1.10"),
    # the rest of sparkinfer (issue 50)
    _spk("lazy-prefill", "main", "lazy-prefill", "no tier",
         why="the batched prefill skips the second half of prompts over 2048 ids"),
    _spk("aa-131k", "main", "aa", "neutral", long_run=True,
         why="an A/A with the shipped 131072 run: its box time per sample"),
    _spk("qwen36-aa", "main", "aa", "neutral", qwen36=True, why="an A/A with the Qwen3.6 file"),
    _spk("qwen36-slow", "slow-moe", "main", "tier", qwen36=True,
         why="main with the MoE layer's routed experts twice -> main: only Qwen3.6's cells move"),
    _spk("sandbox-ab", "main", "main", "measured", kind="sandbox-ab",
         why="main's sweep through the bubblewrap sandbox and the launcher before it, 6 pairs"),
    # one clock (issue 53): the shipped profile (v6 and v7: every witness times every covered cell, an
    # unchanged cell believed once its witness rules a 2% slowdown out), the sweep cut to its cells
    # up to 4096 (decode@128, the hidden cell, among them) for device time
    _spk("aa-speed", "main", "aa", "neutral", speed_cut=True,
         why="an A/A of the shipped profile less its correctness: false flags, box time"),
    _spk("hide-decode", "main", "hide-decode", "caught:decode@128", speed_cut=True,
         why="decode@128 really ~8% slower, printed at main's rate: never unchanged"),
    # profile v7 (witness rule 3, each last look sized from the job's floor): an honest gain still
    # earns its tier, a printed one still earns none, on the same cut sweep
    _spk("decode-cut", "slow-decode", "main", "tier", speed_cut=True,
         why="main with the LM head twice per decode step -> main (+9% decode), the cut sweep"),
    _spk("liar-cut", "main", "liar-decode-110", "no tier", speed_cut=True,
         why="the bench prints decode x1.10, the cut sweep"),
    # issue 53's decision (sparkinfer profile v9: the cells no harness clock times within the budget
    # out of grading, the 131072 run's "unchanged" resting on the samples' check, design A): its
    # cost floor from 8 pairs of that run alone (one H200 pair behind it so far), and Qwen3.6's run
    # and witnesses as shipped, never run on a GPU, on an A/A
    _spk("aa-131k-floor", "main", "aa", "neutral", long_run=True, alone="long", pairs=8,
         why="the shipped 131072 run alone on an A/A, 8 pairs: each sample's wall time for its cost floor"),
    _spk("qwen36-aa-alone", "main", "aa", "eval:none", qwen36=True, alone="qwen36",
         why="an A/A of Qwen3.6's run and witnesses alone: their pair sd and per-process seconds"),
    # the shipped Qwen3.6 run at its real shape, first time: the 40-layer file, its run alone, no
    # witnesses, 3 pairs forced. `measured`: its unwitnessed cells rest on the run's wall clock,
    # whose assumed 4-layer floor 3 pairs may not rule them in (eval:inconclusive then); the
    # figures wanted are each sample's wall time and printed rates, whatever the verdict
    _spk("qwen36-full-aa", "main", "aa", "measured", qwen36=True, qwen36_full=True, alone="qwen36",
         pairs=2, witnesses=False,
         why="an A/A of Qwen3.6's run alone on the 40-layer file, no witnesses, 2 pairs: its samples"),
    # issue 53's no-cover rule at the real shape (session 66): the threshold offset of
    # bench/_hiding_heads.py on the same run as qwen36-full-aa (53Q's A/A, whose wall clock ruled
    # prefill@16384 and @32768 in at 2 pairs): with the printed 1% covering it, prefill@16384's
    # hidden 2% must not be ruled in. No witnesses, 2 pairs: its other cells rest on the wall
    # clock too and are not believed either way (53Q's were not), so only the two fills speak
    _spk("qwen36-offset", "main", "offset-16k", "caught:prefill@16384", qwen36=True,
         qwen36_full=True, alone="qwen36", pairs=2, witnesses=False,
         why="prefill@16384 2% slower, unprinted; the run's other cells printed 1% slower"),
    # sparkinfer's correctness (issue 51): the stable Qwythos file, the shipped correctness section
    _spk("aa", "main", "aa", "eval:none", correctness=True, why="a docs-only head"),
    _spk("broken-prefill", "main", "broken-prefill", "eval:REJECT", correctness=True,
         why="V written to the cache x1024 in the batched prefill"),
    _spk("broken-long-prefill", "main", "broken-long-prefill", "eval:REJECT", correctness=True,
         why="the same, only in fills over 32000 ids: the deep positions carry it"),
    _spk("broken-prefill-cut", "main", "broken-prefill", "eval:REJECT", correctness=True, speed_cut=True,
         why="broken-prefill, the sweep cut to its cells up to 4096: the correctness verdict for less"),
    _spk("bf16-reduction", "main", "bf16-reduction", "pass", correctness=True,
         why="the RMS norm's sum of squares reduced in the reverse order (a named honest change)"),
    # the verdict-cost issue's (44) honest head, with the correctness section, after the A/A
    _spk("honest-4k", "slow", "main", "tier", correctness=True,
         why="int8 prefill projections only to 2048 -> main, scored on the stable file"),
    # llama.cpp (issue 52): the shipped llamacpp profile, correctness on
    _llama("llama-aa", "main", "aa", "neutral", why="a docs-only head: every cell neutral"),
    _llama("llama-speedup", "slow", "main", "tier", why="CUDA graphs off as base -> main"),
    _llama("llama-slow-prefill", "main", "slow-prefill", "regressed:prefill@4096",
           why="each prompt batch of more than one id computed twice"),
    _llama("llama-window-damage", "main", "window-damage", "eval:REJECT",
           why="windows whose first id is 0 mod 5: the top-1 of every 7th position dropped"),
    _llama("llama-broken", "main", "broken", "eval:REJECT", why="qwen3 attention scaled 1/d"),
    # one clock for llamacpp (issue 53): the candidate profile (a witness of each cell's shape,
    # every cell witnessed); its witnesses' floors first, from an A/A of main's three shapes
    Evaluation("llama-witness-aa", LLAMACPP, "main", "main", "measured", depth_witnesses=True,
               kind="witness-aa", why="main against itself: each witness's per-pair sd, 16 pairs"),
    _llama53("llama-aa-53", "main", "aa", "eval:none", why="a docs-only head under the candidate"),
    _llama53("llama-hide-prefill", "main", "hide-prefill", "caught:prefill@4096",
             why="each multi-id batch computed twice, llama-bench printing prefill rates x2"),
]}

# issue -> (its evaluations in the order they run, the Qwythos file it scores, its default budget)
ISSUES: dict[str, tuple[tuple[str, ...], str, int]] = {
    "49": (("decode-b", "deep-decode", "liar-decode-105", "liar-prefill-110"), "random", 1500),
    "50": (("lazy-prefill", "qwen36-aa", "qwen36-slow", "aa-131k", "sandbox-ab"), "random", 1500),
    "51": (("aa", "broken-prefill", "broken-long-prefill", "bf16-reduction", "honest-4k"), "stable", 1500),
    "53": (("aa-speed", "hide-decode", "decode-cut", "liar-cut"), "random", 1300),
    "53S": (("aa-131k-floor", "qwen36-aa-alone"), "random", 1400),
    "53Q": (("qwen36-full-aa",), "random", 1500),
    "53O": (("qwen36-offset",), "random", 1500),
    "52": (("llama-aa", "llama-speedup", "llama-slow-prefill", "llama-window-damage", "llama-broken"),
           "", 1500),
    "53L": (("llama-witness-aa", "llama-aa-53", "llama-hide-prefill"), "", 1700),
}


def evaluations_of(issue: str, only: list[str] | None = None) -> list[Evaluation]:
    """The issue's evaluations, or the ones named (in the order named); one engine per run."""
    if issue not in ISSUES:
        raise ValueError(f"unknown run {issue!r}: one of {', '.join(ISSUES)}")
    names = only or list(ISSUES[issue][0])
    unknown = [n for n in names if n not in EVALUATIONS]
    if unknown:
        raise ValueError(f"unknown evaluation(s) {', '.join(unknown)}: one of {', '.join(EVALUATIONS)}")
    picked = [EVALUATIONS[n] for n in names]
    engines = {e.engine for e in picked} | {EVALUATIONS[n].engine for n in ISSUES[issue][0]}
    if len(engines) > 1:
        raise ValueError(f"run {issue} is one engine's: {', '.join(names)} mixes "
                         f"{' and '.join(sorted(engines))}")
    return picked
