"""How often do speed verdicts lie, and what do they cost? Each shipped profile's exact job, simulated.

First table (per profile, per sample pace): honest heads per model and per metric, and the A/A,
each evaluation the real harness (engine.measure.speed.Measurement: warm-ups, ABBA pairs, looks,
the budget, the samples' checks, the witnesses' order, room and stops) on a simulated box
(bench/_simbox.py), graded by the real grading (evalbot.grading.grade.grade). Processes' times,
rates and noise are the profile's measured fixtures under tests/data/ (bench/_paces.py), "pace
assumed" where none exists; `--paces` replaces every sample process's time. sparkinfer is also
simulated with its Qwythos runs alone (one model). Heads (bench/_rows.py): faster by +3, +5 and
+10% on one model's decode cells only, its prefill cells only, or every cell; "bf16": every cell,
its witness ids main's runner-up at 1% of the steps, all at main's near ties (bench/_simbox.py
NEAR_TIES; free-running witnesses diverge there); "skips 2% of steps, guesses ids": the liar the
near-tie credit must not pay. Targets: an honest head earns a tier no higher than its true one
in >= 95% (where a witness covers a cell it changes); a bf16 head its exact twin's true tier at
least 95% as often (the two on the same seed: the same box, only the flips differ); the
skipping liar a tier in <= 1%; the A/A is wrong (a tier, a regression, spoofed) in <= 1% and
inconclusive in <= 5%. Liars: bench/spoof_quality.py.
Box seconds, in all and per stage: bench/_rows.py's columns; per verdict kind: bench/box_time.py.

Second table (`--rule`): the stopping rule alone, vectorised (bench/_rule_sim.py). The job is
what `make_job` builds for the profile under the `default` policy: its cells and runs, looks,
floors (and their degrees of freedom), critical values, tier edges, warm-ups, box-time budget
and fault screen. Paired samples are drawn for many simulated PRs at once and pushed through
the decision code the harness and the grader run (`engine.contract.shared.stats.decide`,
`engine.contract.shared.faults.screened_pairs`), pair by pair: the screen drops faulted pairs (measured
again, up to its attempts' cap), a look fires when the run's kept pairs reach its count, a cell
stops at its first final look, a run once all its cells are final, at its last look, or when
the budget shared by all runs is spent (checked before each pair, charged for kept pairs, each
run keeping the time of its first verdict look, as engine/measure/speed.py does; counted in
pairs at the first run's pace: StoppingRule.total_budget_s); at each look the run's cells test
their calibration together (engine.contract.shared.stats.calibration_refuted). Its pace per process is
the fixtures' (bench/_paces.py) or `--paces`' first.

Noise per profile (what it is measured to be):
  llamacpp     resampled pairs of the shipped profile's own H200 A/A (tests/data/llamacpp/
               h200-aa.results.json: 21 pairs of its argv, every cell of a pair drawn together,
               sides swapped at random); "+slow first": in a third of the processes the first
               test after the model load runs 10% slow (docs/gpu-e2e.md), which hits a scored
               cell only when the profile scores the process's first test (its parse
               `discard_first`); "prefill@0 kept": the profile before version 2, depth-0 prefill
               scored, as that A/A measured it (its scored copy slow in 24 of 42 processes).
  generic      the llamacpp job at 1% and 2% per sample (normal), with the floors a 12-pair
               `evalbot calibrate` would store (sqrt(2) x sigma, 11 degrees of freedom).
  sparkinfer   0.05% and 0.25% per sample (its rounds on the H200), normal; "1% (stale 4x)":
               four times the noise its floor says, to show the guards at work.
Stresses (issue 33, bench/_stress.py), on each profile's measured noise: a slow first test in a
third of the processes, a silent throttle (5% of the processes 5% slow), t(3) tails, a linear
drift across the run, and a stale floor (the box 2x as noisy as calibrated). Bars for every row:
A/A false <= 1%; on measured noise also inconclusive <= 5% and each centre's tier >= 90%.
  demo         3% per pair (its calibrated floor), normal; its s = t = 30% by design, so the
               power and tier columns (effects of a few percent) do not apply to it.
Synthetic noise: cells of one process share half their variance; a slow random walk of the box
(0.1 sigma per process) is shared by everything measured after it.

Figures per PR: false = any cell improved, regressed or slower in an A/A; inconc = any cell
inconclusive in an A/A; pow+x = the changed cell (the profile's noisiest primary decode cell) is
improved at a true +x%; tier = the changed cell gets the tier of a true effect at each tier's
centre (XS 2.75%, S 4.75%, M 8%, L 14%, XL 22%): the lowest of the five, and the largest share two
or more tiers away; <s = a tier for a true +1% (below the significance threshold); pairs = mean
pairs per run in the A/A (and at the XS centre); box = mean box minutes per PR of the A/A
(its warm-ups and measuring, bench/_box_stages.py; every stage: the first table's and
bench/box_time.py), at the per-process pace in the header, and at the
profile's power target (@tgt: +5% llamacpp, +3% sparkinfer); fix = the fixed-n minimum: the
fewest pairs a single look with a known sd needs for the same error rates (A/A: every cell
neutral 95% of the time; @XS: an effect at the XS centre improved at XS 90% of the time); ratio =
mean pairs / fixed-n, A/A and @XS; pairs/fixed-n at S, +3%, +5%: mean pairs of the changed cell's
run at the S centre, +3% and +5%, the fixed-n minimum for the power and tier accuracy the rule
reached there, and for the bars (95% power, 90% tier; bench/_fixedn.py). Under each profile's
table: the fixed-n minimum that keeps the A/A within 1% under its slow-first stress (one look,
a verdict possible from the first pair): no design with fewer pairs is safe there.
First table, heads "centre T model metric": that metric's cells faster by tier T's centre,
with the witnesses: the right tier >= 90%.

Under each profile's table: the fixed-n minimum under the stresses (the most pairs one look
needs for the bars under any of slow first, throttle, t(3) tails, drift, at the changed cell's
per-pair sd there, and at least the A/A's slow-first minimum), against the rule's pairs on the
measured noise; and the hostile head the fault screen must not help (ATTACK_GAIN faster in most
of its processes, main's speed in the rest: tiered above its mean's tier, with and without the
screen).

Usage: python bench/verdict_quality.py [--sims 300] [--liar-sims 1000] [--paces measured,25,60,120]
       [--profiles sparkinfer,llamacpp] [--heads +5%] [--jobs N]
       [--rule [--rule-sims 4000] [--profile NAME]]
The first table at the measured pace (300 a row, 1,000 for the A/A): 877 s on 2 busy cores; the
paces 25, 60, 120 at --sims 100: 169 s on 2 idle ones. `--sims 3` checks it in seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _fixedn, _paces, _rows  # noqa: E402
from bench._rule_sim import Sim, pace_s, simulate  # noqa: E402
from bench._scenarios import STRESSES, Scenario, changed_cell, job_of, scenarios, stresses  # noqa: E402
from bench._simbox import Head  # noqa: E402
from evalbot.engine.contract.job import Job  # noqa: E402
from evalbot.engine.contract.shared import stats  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading import sequential  # noqa: E402
from evalbot.grading.policy import TIER_ORDER, Policy, load_labels  # noqa: E402

POWER = (0.02, 0.03, 0.05)
CENTRES = {"XS": 0.0275, "S": 0.0475, "M": 0.08, "L": 0.14, "XL": 0.22}
BELOW_S = 0.01
EFFORT = {"S": CENTRES["S"], "+3%": 0.03, "+5%": 0.05}


def tier_index(gain: np.ndarray, policy: Policy) -> np.ndarray:
    """0 = XL ... 4 = XS, as grading tiers an improved decode cell by its estimate."""
    out = np.full(gain.shape, len(TIER_ORDER) - 1)
    for i in reversed(range(len(TIER_ORDER))):
        out[gain >= policy.tiers[TIER_ORDER[i]]] = i
    return out


def pair_sds(job: Job, sc: Scenario, rng: np.random.Generator) -> dict[str, float]:
    """sd of a pair's log-ratio per cell under the scenario's noise."""
    sds = {}
    for index, run in enumerate(job.runs):
        x = sc.noise(rng, 4000, 2, index, run)
        for i, c in enumerate(run.cells):
            sds[c.key] = float(np.std(x[:, i, 1] - x[:, i, 0]))
    return sds


def fixed_n(job: Job, sc: Scenario, rng: np.random.Generator,
            policy: Policy) -> tuple[int, int]:
    """Fewest pairs of one look with a known sd for the same error rates: (A/A: every cell
    neutral 95% with the false rate at alpha; XS centre: improved at the XS tier 90%)."""
    sds = pair_sds(job, sc, rng)
    sd = sds[changed_cell(job)]
    up, hi_xs = math.log1p(job.rule.significance), math.log1p(policy.tiers["S"])
    z_alpha, z_eq = sps.norm.isf(policy.alpha / (2 * job.rule.family)), sps.norm.isf(0.05)
    centre = math.log1p(max(CENTRES["XS"], job.rule.significance * 1.375))
    n_aa = n_xs = 0
    for n in range(2, 400):
        se = {k: v / math.sqrt(n) for k, v in sds.items()}
        neutral = math.prod(2 * sps.norm.cdf((up - z_eq * s) / s) - 1 for s in se.values())
        s_xs = sd / math.sqrt(n)  # improved (significant, material) and below the S threshold
        tier = sps.norm.cdf((hi_xs - centre) / s_xs) - \
            sps.norm.cdf((max(up, z_alpha * s_xs) - centre) / s_xs)
        n_aa = n_aa or (n if neutral >= 0.95 else 0)
        n_xs = n_xs or (n if tier >= 0.9 else 0)
        if n_aa and n_xs:
            break
    return n_aa or 400, n_xs or 400


@dataclass(frozen=True)
class Figures:
    cells: int
    false: float
    inconclusive: float
    power: list[float]  # at POWER
    tier: list[float]  # right tier at each of CENTRES
    far: float  # two or more tiers away, the worst centre
    below: float  # a tier at a true BELOW_S
    pairs: float  # mean pairs per run (the longest run), A/A
    xs_pairs: float  # ... at the XS centre
    box_min: float  # mean box minutes per PR, A/A
    box_target: float  # ... at the profile's power target
    fixed: tuple[int, int]  # fixed-n minimum: A/A, XS centre
    # at EFFORT (the S centre, +3%, +5%): mean pairs of the changed cell's run, and the fixed-n
    # minimum for the rule's own power and tier accuracy there (bench/_fixedn.py)
    effort: list[tuple[float, int, int]]


def measure(sc: Scenario, policy: Policy, sims: int, rng: np.random.Generator,
            given: float | None = None) -> Figures:
    """Every figure of one row (module docstring)."""
    job = job_of(sc, policy)
    target = [c.key for c in job.cells].index(changed_cell(job))
    aa = simulate(job, sc, 0.0, sims, rng, given)
    wrong = np.isin(aa.final, [stats.IMPROVED, stats.REGRESSED, stats.SLOWER])
    powered = {e: simulate(job, sc, e, sims // 2, rng, given)
               for e in (*POWER, sc.target)}
    power = [float(np.mean(powered[e].final[:, target] == stats.IMPROVED)) for e in POWER]
    right, far, xs_pairs = [], [], 0.0
    at = dict(powered)
    for i, effect in enumerate(CENTRES.values()):
        sim = at[effect] = simulate(job, sc, effect, sims // 2, rng, given)
        improved = sim.final[:, target] == stats.IMPROVED
        got = tier_index(np.expm1(sim.estimate), policy)
        want = len(TIER_ORDER) - 1 - i
        right.append(float(np.mean(improved & (got == want))))
        far.append(float(np.mean(improved & (np.abs(got - want) >= 2))))
        xs_pairs = xs_pairs or float(np.mean(sim.pairs.max(axis=1)))
    below = simulate(job, sc, BELOW_S, sims // 2, rng, given).final[:, target] \
        == stats.IMPROVED
    return Figures(len(job.cells), float(np.mean(wrong.any(axis=1))),
                   float(np.mean((aa.final == stats.UNDECIDED).any(axis=1))), power, right,
                   max(far), float(np.mean(below)), float(np.mean(aa.pairs.max(axis=1))),
                   xs_pairs, float(np.mean(aa.box_s)) / 60,
                   float(np.mean(powered[sc.target].box_s)) / 60, fixed_n(job, sc, rng, policy),
                   effort(job, sc, at, target, rng, policy))


def effort(job: Job, sc: Scenario, at: dict[float, Sim], target: int,
           rng: np.random.Generator, policy: Policy) -> list[tuple[float, int, int]]:
    """Mean pairs of the changed cell's run at each of EFFORT, the fixed-n minimum for the
    power and the tier accuracy the rule reached there, and for the targets (95%, 90%)."""
    sd = pair_sds(job, sc, rng)[changed_cell(job)]
    out = []
    for effect in EFFORT.values():
        sim = at[effect]
        improved = sim.final[:, target] == stats.IMPROVED
        lo, hi = _fixedn.tier_range(effect, policy, job.rule.significance)
        right = improved & (sim.estimate >= lo) & (sim.estimate < hi)
        n = _fixedn.fixed_n(effect, sd, job.rule.family, policy, job.rule.significance,
                            min(float(np.mean(improved)), _fixedn.CEILING),
                            min(float(np.mean(right)), _fixedn.CEILING))
        aim = _fixedn.fixed_n(effect, sd, job.rule.family, policy, job.rule.significance,
                              _fixedn.POWER_TARGET, _fixedn.TIER_TARGET)
        out.append((float(np.mean(sim.target_pairs)), n, aim))
    return out


def robust_fixed_n(sc: Scenario, policy: Policy, sims: int, rng: np.random.Generator) -> int:
    """Fewest pairs of one look (the pooled rule, no bar on early verdicts) whose A/A false rate
    under the scenario's noise is at most 1% per PR: what any fixed-n design must pay there."""
    job = job_of(sc, policy)
    for n in range(2, 17):
        bounds = sequential.schedule([n], job.rule.family, policy.alpha,
                                     pool_df=job.rule.pool_df)
        rule = replace(job.rule, looks=[n], **sequential.rule_lists(bounds))
        aa = simulate(replace(job, rule=rule), sc, 0.0, sims, rng)
        if np.mean(np.isin(aa.final, [stats.IMPROVED, stats.REGRESSED, stats.SLOWER])
                   .any(axis=1)) <= 0.01:
            return n
    return 17


def row(sc: Scenario, policy: Policy, sims: int, rng: np.random.Generator,
        given: float | None = None) -> tuple[str, Figures]:
    f = measure(sc, policy, sims, rng, given)
    return line(sc, f), f


def line(sc: Scenario, f: Figures) -> str:
    n_aa, n_xs = f.fixed
    tiers = "/".join(f"{100 * x:.0f}" for x in f.tier)
    small = sc.target > 0.2  # the demo: effects of a few percent are below its s by design
    cols = (["-"] * 3 if small else [_pct(p) for p in f.power]) + \
        (["-", "-", "-"] if small else [tiers, _pct(f.far), _pct(f.below)])
    xs = ("-", "-", "-") if small else (f"{f.xs_pairs:.1f}", str(n_xs),
                                        f"{f.xs_pairs / n_xs:.2f}")
    return (f"{sc.name:<21}{f.cells:>3} | {_pct(f.false):>6}{_pct(f.inconclusive):>7}"
            + "".join(f"{c:>7}" for c in cols[:3])
            + f" {cols[3]:<16}{cols[4]:>6}{cols[5]:>6}{f.pairs:>6.1f}{xs[0]:>6}"
            f"{f.box_min:>6.1f}{f.box_target:>6.1f}{n_aa:>5}{xs[1]:>5}{f.pairs / n_aa:>6.2f}"
            f"{xs[2]:>6}  " + ("-" if small else
                               " ".join(f"{p:.1f}/{n}/{a}" for p, n, a in f.effort)))


def fixed_under_stresses(name: str, policy: Policy, rng: np.random.Generator, robust: int,
                         effects: tuple[float, ...] = tuple(EFFORT.values())
                         ) -> list[tuple[int, str]]:
    """Per effect (EFFORT's): the fixed-n minimum for the bars (95% power, 90% tier; bench/_fixedn.py)
    under the worst of the profile's stresses, each at its own per-pair sd of the changed cell
    (a one-look design cannot tell a stressed box from a steady one: it must be sized for the
    stress), and at least `robust` (its A/A within 1% under a slow first test); and which."""
    out = []
    for effect in effects:
        worst = (robust, "A/A under slow first")
        for sc in stresses(name):
            job = job_of(sc, policy)
            sd = pair_sds(job, sc, rng)[changed_cell(job)]
            n = _fixedn.fixed_n(effect, sd, job.rule.family, policy, job.rule.significance,
                                _fixedn.POWER_TARGET, _fixedn.TIER_TARGET)
            worst = max(worst, (n, sc.name))
        out.append(worst)
    return out


def stressed_line(name: str, measured: Figures, robust: int, policy: Policy,
                  rng: np.random.Generator) -> str:
    """The rule's pairs at the S centre, +3% and +5% on the measured noise against the fixed-n
    a one-look design needs to meet the bars under every stress the rule survives."""
    parts = []
    for label, (pairs, _, _), (fixed, why) in zip(
            EFFORT, measured.effort, fixed_under_stresses(name, policy, rng, robust), strict=True):
        parts.append(f"{label} {pairs:.1f}/{fixed} = {pairs / fixed:.2f} ({why})")
    return ("pairs on the measured noise / fixed-n under the stresses (the worst of "
            + ", ".join(STRESSES) + "): " + "; ".join(parts))


ATTACK_GAIN, ATTACK_NORMAL = 0.06, (0.2, 0.4)


def attack_line(sc: Scenario, policy: Policy, sims: int, rng: np.random.Generator) -> str:
    """A hostile head ATTACK_GAIN faster in the changed cell in most of its processes and at
    main's speed in the rest (the fault screen must not drop its slow ones for it): the share of
    PRs tiered above its mean gain's tier, with the screen and without (fault_sigmas 0)."""
    job = job_of(sc, policy)
    plain = replace(job, rule=replace(job.rule, fault_sigmas=0.0))
    target = [c.key for c in job.cells].index(changed_cell(job))
    parts = []
    for share in ATTACK_NORMAL:
        want = tier_index(np.array([(1 - share) * ATTACK_GAIN]), policy)[0]
        above = []
        for j in (job, plain):
            sim = simulate(j, sc, ATTACK_GAIN, sims, rng, normal_share=share)
            improved = sim.final[:, target] == stats.IMPROVED
            above.append(np.mean(improved & (tier_index(np.expm1(sim.estimate), policy) < want)))
        parts.append(f"{1 - share:.0%} fast: {_pct(above[0])} (no screen {_pct(above[1])})")
    return (f"hostile head +{ATTACK_GAIN:.0%} in some processes, main's speed in the rest, "
            f"tiered above its mean gain's tier ({sims} PRs each): " + "; ".join(parts))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def honest_and_aa(profile: Profile) -> list[Head]:
    """The first table's heads: honest ones per model and metric, bf16 ones, the liar that
    skips a few witness steps (what the bf16 heads' near-tie credit must not pay), the A/A."""
    return [*_rows.honest_heads(profile, bf16=False), *_rows.honest_heads(profile, bf16=True),
            _rows.SKIPPER, *_rows.centre_heads(profile), _rows.AA]


def rule_table(args: argparse.Namespace, policy: Policy, given: float | None) -> None:
    """The stopping rule alone (module docstring), every scenario of the chosen profiles."""
    rng = np.random.default_rng(args.seed)
    head = (f"{'noise':<21}{'cls':>3} | {'false':>6}{'inconc':>7}{'pow+2':>7}{'pow+3':>7}"
            f"{'pow+5':>7} {'tier XS/S/M/L/XL':<16}{'far':>6}{'<s':>6}{'pairs':>6}{'@XS':>6}"
            f"{'box':>6}{'@tgt':>6}{'fix':>5}{'@XS':>5}{'ratio':>6}{'@XS':>6}"
            f"  pairs/fixed-n (same/target) at S, +3%, +5%")
    print(f"\npolicy default: alpha {policy.alpha} per PR, s = t = 2%, tiers by the estimate; "
          f"{args.rule_sims} A/A PRs per row, {args.rule_sims // 2} per effect")
    for name in dict.fromkeys(sc.profile for sc in scenarios()):
        if args.profile and name != args.profile:
            continue
        profile = load_profile(name)
        s = profile.speed
        job = job_of(next(sc for sc in scenarios() if sc.profile == name), policy)
        pace = ", ".join(f"{r.model} {pace_s(name, r, given):.1f} s" + (
            " (pace assumed)" if not given and _paces.run_pace(
                name, r.model, {c.ctx for c in r.cells}).assumed else "") for r in job.runs)
        scaled = job.rule.total_budget_s(pace_s(name, job.runs[0], given))
        print(f"\n{name}: looks {list(s.looks)}, budget {s.budget_s:.0f} s ({scaled:.0f} s at "
              f"main's pace), floor df {s.sd_floor_df}, pace {pace} per process")
        print(head)
        print("-" * len(head))
        measured = None
        for sc in scenarios():
            if sc.profile == name:
                text, f = row(sc, policy, args.rule_sims, rng, given)
                print(text, flush=True)
                measured = f if sc.measured else measured
        slow = next((sc for sc in scenarios() if sc.profile == name and "slow first" in sc.name),
                    None)
        robust = robust_fixed_n(slow, policy, args.rule_sims, rng) if slow else 0
        if slow:
            print(f"fixed-n minimum with A/A false <= 1% under '{slow.name}' (one look, "
                  f"verdicts from its first pair): {robust} pairs")
        if measured and stresses(name):
            print(stressed_line(name, measured, robust, policy, rng))
            print(attack_line(next(sc for sc in scenarios() if sc.profile == name and sc.measured),
                              policy, args.rule_sims // 2, rng))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _rows.add_arguments(ap, "sparkinfer,llamacpp")
    ap.add_argument("--rule", action="store_true", help="also the stopping rule's own table")
    ap.add_argument("--rule-sims", type=int, default=4000, help="simulated A/A PRs per row")
    ap.add_argument("--profile", default="", help="the rule table: only this profile's rows")
    args = ap.parse_args(argv)
    started = time.monotonic()
    _rows.run_from(args, honest_and_aa)
    if args.rule:
        policy = load_labels(ROOT / "labels.yaml").policy("default")
        first = args.paces.split(",")[0]
        rule_table(args, policy, None if first == "measured" else float(first))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
