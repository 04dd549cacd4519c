"""The rows both benches print: heads per model and per metric, run through the simulated box
(bench/_simbox.py) on each profile's measured paces or a given one, and their table.

Columns: P(tier); P(tier higher than the true one); P(inconclusive); P(spoofed); the mean box
seconds of an evaluation (every stage: bench/_box_stages.py); the issue's target for the row and
whether it holds. After each table, the same box seconds per stage.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import _box_stages, _simbox
from bench._box_stages import Evaluation, Stages
from bench._simbox import Head, World
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.grading.box_time import STAGES

GAINS = (0.03, 0.05, 0.10)
LIES = (1.05, 1.1, 1.3, 2.0, 10.0)
JUNK = (0.5, 0.75, 0.9)
BF16_FLIPS = 0.01  # argmax flips at about 1% of steps (the bf16-level numerics), all at
# main's near ties (bench/_simbox.py NEAR_TIES): there the witness credits main's runner-up
BF16 = "bf16 "  # a bf16 head's name: this before its exact twin's
SKIP_SHARE = 0.02  # a liar that skips this share of its witness's steps and guesses their ids
HONEST_TARGET, LIAR_TARGET, AA_FALSE, AA_INCONCLUSIVE = 0.95, 0.01, 0.01, 0.05
CENTRE, CENTRE_TARGET = "centre", 0.90  # heads at a tier's centre: the right tier >= 90%
CENTRES = {"XS": 0.0275, "S": 0.0475, "M": 0.08, "L": 0.14, "XL": 0.22}
CHUNK = 50  # evaluations per task: rows spread over the workers


@dataclass(frozen=True)
class Variant:
    """A profile as the table simulates it, and whose fixtures give its paces."""

    label: str
    profile: Profile
    fixtures: str


def variants(names: Iterable[str]) -> list[Variant]:
    """Each shipped profile; sparkinfer also with its Qwythos runs alone (one model)."""
    out = []
    for name in names:
        profile = load_profile(name)
        out.append(Variant(name, profile, name))
        if len(profile.models) > 1:
            first = profile.models[0].name
            out.append(Variant(f"{name}, {first} only", _simbox.one_model(profile, first), name))
    return out


def honest_heads(profile: Profile, bf16: bool) -> list[Head]:
    """Per model: faster on its decode cells only, its prefill cells only, every cell; at each
    of GAINS; with bf16-level numerics (every cell only), when asked."""
    out = []
    for model in (m.name for m in profile.models):
        cells = [(f"{model}/{c.metric}@{c.ctx}", c.metric)
                 for r in profile.runs if r.model == model for c in r.cells]
        scopes = {"decode": [c for c in cells if c[1] == "decode"],
                  "prefill": [c for c in cells if c[1] == "prefill"], "every cell": cells}
        for scope, chosen in scopes.items():
            if not chosen or (bf16 and scope != "every cell"):
                continue
            for g in GAINS:
                tiers = [_simbox.true_tier(metric, g) for _, metric in chosen]
                best = max(tiers, key=lambda t: _simbox.RANK.get(t or "none", 0))
                out.append(Head(f"{BF16 if bf16 else ''}{model} {scope} +{100 * g:.0f}%",
                                real={k: 1 + g for k, _ in chosen},
                                flips=BF16_FLIPS if bf16 else 0.0, true_tier=best))
    return out


def liar_heads(profile: Profile) -> list[Head]:
    """bench/spoof_quality.py's liars: printed factors on every cell, on the first witnessed
    cell, on every cell at that cell's context; junk tails (a share of ids invented, the
    samples' decode work skipped to match)."""
    keys = [f"{r.model}/{c.metric}@{c.ctx}" for r in profile.runs for c in r.cells]
    first = next(k for r in profile.runs for w in r.witnesses for k in w.cells)
    ctx = first.rsplit("@", 1)[1]
    out = []
    for f in LIES:
        out.append(Head(f"lie {f:g}x all", printed={k: f for k in keys}, honest=False))
        out.append(Head(f"lie {f:g}x one", printed={first: f}, honest=False))
        out.append(Head(f"lie {f:g}x ctx", printed={k: f for k in keys if k.endswith("@" + ctx)},
                        honest=False))
    out += [Head(f"junk tail {a:g}", agreement=a, honest=False) for a in JUNK]
    out.append(SKIPPER)
    # issue 29's two demo attacks, at the gains they printed there. Forking after READY: the
    # orphan does the work, the handoff clock (or the cgroup's cpu clock) still times it, so its
    # witness costs what main's does (modelled as honest work, no gain). Reading ahead to batch
    # the decode: it never gets the next id before answering (`reads_ahead`).
    out.append(Head("attack: fork after READY", printed={k: 1.819 for k in keys}, honest=False))
    out.append(Head("attack: batch read-ahead", printed={k: 1.678 for k in keys}, honest=False,
                    reads_ahead=True))
    return out


def centre_heads(profile: Profile) -> list[Head]:
    """Per model and metric, every cell of that metric faster by each tier's centre (prefill:
    its time to first token shorter by the centre), the tier it deserves named."""
    out = []
    for model in (m.name for m in profile.models):
        for metric in ("decode", "prefill"):
            keys = [f"{model}/{c.metric}@{c.ctx}" for r in profile.runs if r.model == model
                    for c in r.cells if c.metric == metric]
            for tier, centre in CENTRES.items() if keys else ():
                gain = centre if metric == "decode" else 1 / (1 - centre) - 1
                out.append(Head(f"{CENTRE} {tier} {model} {metric}",
                                real={k: 1 + gain for k in keys}, true_tier=tier))
    return out


AA = Head("A/A", honest=False)
# skips a few steps of its witness (and as much of its samples' decode work), guessing those
# ids: no near-tie credit can reach a guess, so it is charged as any invented id
SKIPPER = Head(f"skips {100 * SKIP_SHARE:g}% of steps, guesses ids", agreement=1 - SKIP_SHARE,
               honest=False)


def witnessed(profile: Profile, head: Head) -> bool:
    """Does any witness cover a cell the head changes?"""
    covered = {k for r in profile.runs for w in r.witnesses for k in w.cells}
    return bool(covered & set(head.real))


@dataclass
class Tally:
    n: int = 0
    tier: int = 0
    higher: int = 0
    inconclusive: int = 0
    spoofed: int = 0
    false: int = 0  # an A/A's verdict other than neutral or inconclusive
    measure_s: float = 0.0  # warm-ups included
    witness_s: float = 0.0
    warmup_s: float = 0.0
    scored: int = 0  # evaluations that went on to correctness (no failure stopped them)
    runs: dict[int, int] = field(default_factory=dict)  # runs reached -> evaluations
    tiers: dict[str, int] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        for name in ("n", "tier", "higher", "inconclusive", "spoofed", "false", "measure_s",
                     "witness_s", "warmup_s", "scored"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for t, k in other.tiers.items():
            self.tiers[t] = self.tiers.get(t, 0) + k
        for r, k in other.runs.items():
            self.runs[r] = self.runs.get(r, 0) + k


_EVALUATORS: dict[tuple[str, float | None], _simbox.Evaluator] = {}


def _evaluator(variant: Variant, pace: float | None) -> _simbox.Evaluator:
    key = (variant.label, pace)
    if key not in _EVALUATORS:
        workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=_fast_tmp()))
        _EVALUATORS[key] = _simbox.Evaluator(variant.profile, World(variant.fixtures, pace),
                                             workdir)
    return _EVALUATORS[key]


def _fast_tmp() -> str | None:
    """A memory-backed directory where there is one: the harness writes each wall-clock
    witness's prompt files."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_chunk(variant: Variant, pace: float | None, head: Head, sims: int, seed: int) -> Tally:
    """`sims` whole evaluations of one head."""
    evaluator, rng, out = _evaluator(variant, pace), np.random.default_rng(seed), Tally()
    with _simbox.seeded_prompts(seed):
        for _ in range(sims):
            o = evaluator.evaluate(head, rng)
            out.n += 1
            out.tier += o.tier is not None
            out.higher += _simbox.higher(o.tier, head.true_tier)
            out.inconclusive += o.kind == "inconclusive"
            out.spoofed += o.kind == "spoofed"
            out.false += o.kind not in ("neutral", "inconclusive")
            out.measure_s += o.measure_s
            out.witness_s += o.witness_s
            out.warmup_s += o.warmup_s
            out.scored += o.scored
            out.runs[o.runs] = out.runs.get(o.runs, 0) + 1
            out.tiers[o.tier or "-"] = out.tiers.get(o.tier or "-", 0) + 1
    return out


def _row_seed(variant: Variant, pace: float | None, head: Head) -> int:
    """A row's seed: a bf16 head's is its exact twin's (common random numbers: the two see the
    same box, so "keeps the exact head's tier" compares flips, not luck)."""
    return zlib.crc32(f"{variant.label}|{pace}|{head.name.removeprefix(BF16)}".encode()) % 999_983


def tally_rows(rows: Sequence[tuple[Variant, float | None, Head, int]], seed: int,
               jobs: int) -> list[Tally]:
    """Every row's evaluations, in chunks over `jobs` worker processes (1: in this one)."""
    tasks = [(i, (v, pace, head, min(CHUNK, sims - start),
                  seed * 1_000_003 + _row_seed(v, pace, head) + start))
             for i, (v, pace, head, sims) in enumerate(rows) for start in range(0, sims, CHUNK)]
    out = [Tally() for _ in rows]
    if jobs <= 1:
        for i, args in tasks:
            out[i].add(run_chunk(*args))
        return out
    with ProcessPoolExecutor(jobs) as pool:
        futures = [(i, pool.submit(run_chunk, *args)) for i, args in tasks]
        for i, fut in futures:
            out[i].add(fut.result())
    return out


def target(variant: Variant, head: Head, t: Tally, exact: Tally | None = None) -> str:
    """The issue's target for the row, and whether it holds; a bf16 head's against the same
    head with exact numerics (`exact`): it keeps that head's true tier in >= 95% as often."""
    if head is AA or head.name == AA.name:
        ok = t.false <= AA_FALSE * t.n and t.inconclusive <= AA_INCONCLUSIVE * t.n
        return f"false <= 1%, inconc <= 5%: {_mark(ok)}"
    if not head.honest:
        return f"tier <= 1%: {_mark(t.tier <= LIAR_TARGET * t.n)}"
    if not witnessed(variant.profile, head):
        return "n/a: no witness covers it"
    if head.flips and exact is not None:
        kept, exact_kept = (x.tiers.get(head.true_tier or "-", 0) for x in (t, exact))
        return (f"keeps the exact head's tier ({exact_kept}) >= 95%: "
                f"{_mark(kept >= HONEST_TARGET * exact_kept)}; tier <= true: "
                f"{_mark(t.tier - t.higher >= HONEST_TARGET * t.n)}")
    if head.name.startswith(CENTRE):
        right = t.tiers.get(head.true_tier or "-", 0)
        return f"right tier >= 90%: {_mark(right >= CENTRE_TARGET * t.n)}"
    return f"tier <= true >= 95%: {_mark(t.tier - t.higher >= HONEST_TARGET * t.n)}"


def _mark(ok: bool) -> str:
    return "holds" if ok else "FAILS"


HEADER = ("| head | true | n | P(tier) | P(> true) | P(inconc) | P(spoofed) | box s | tiers | "
          "target |")
RULE = "|---|---|---:|---:|---:|---:|---:|---:|---|---|"
STAGE_HEADER = ("| builds | warm-ups | measuring | witnesses | reference | main | PR | rest | total | "
                "min | reference cold | total cold |")
STAGE_RULE = "---:|" * 12


def line(variant: Variant, head: Head, t: Tally, box: Evaluation,
         exact: Tally | None = None) -> str:
    n = max(t.n, 1)
    tiers = " ".join(f"{k}:{v}" for k, v in sorted(t.tiers.items()) if k != "-") or "-"
    return (f"| {head.name} | {head.true_tier or '-'} | {t.n} | {_pct(t.tier / n)} | "
            f"{_pct(t.higher / n)} | {_pct(t.inconclusive / n)} | {_pct(t.spoofed / n)} | "
            f"{stages(box, t).total:.0f} | {tiers} | {target(variant, head, t, exact)} |")


def box_model(variant: Variant, pace: float | None) -> Evaluation:
    """The variant's modelled stages at this sample pace (bench/_box_stages.py)."""
    return _box_stages.evaluation(variant.profile, variant.fixtures,
                                  _evaluator(variant, pace).job, World(variant.fixtures, pace))


def stages(box: Evaluation, t: Tally, rounds: int = 1, warm: bool = True) -> Stages:
    """A row's mean stages: its simulated measuring (warm-ups apart) and witnesses, the rest
    modelled, correctness for `rounds` rounds in the share of them that reached it."""
    n = max(t.n, 1)
    reached = {runs: k / n for runs, k in t.runs.items()}
    return box.stages((t.measure_s - t.warmup_s) / n, t.witness_s / n, rounds, warm,
                      t.scored / n, reached)


def stage_cells(box: Evaluation, t: Tally, rounds: int = 1) -> str:
    """The per-stage columns (STAGE_HEADER): the reference warm, then the total cold."""
    warm, cold = stages(box, t, rounds), stages(box, t, rounds, warm=False)
    cells = [*warm.seconds.values(), warm.total, warm.total / 60,
             cold.seconds["correctness_reference"], cold.total]
    return " | ".join(f"{c:.1f}" if i == len(STAGES) + 1 else f"{c:.0f}"
                      for i, c in enumerate(cells))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def pace_header(variant: Variant, pace: float | None) -> str:
    """Where the row's process times come from: each run's and each witness's pace, with
    "pace assumed" beside the ones no fixture measured."""
    world = World(variant.fixtures, pace)
    job = _evaluator(variant, pace).job
    runs = []
    for run in job.runs:
        p = world.run(run)
        ctxs = ",".join(str(c.ctx) for c in run.cells if c.metric == "decode")
        told = f"{pace:.0f} s (given)" if pace else f"{p.seconds:.1f} s" + (
            " (pace assumed)" if p.assumed else "")
        runs.append(f"{run.model}@{ctxs}: {told}")
        for spec in run.witnesses:
            w = world.witness(run, spec)
            runs.append(f"witness {spec.name}: {w.wall_s:.1f} s a process, {spec.clock} clock "
                        f"{w.seconds:.2f} s" + (" (pace assumed)" if w.assumed else ""))
    return "; ".join(runs)


def print_tables(heads: Callable[[Profile], list[Head]], names: Iterable[str],
                 paces: Sequence[float | None], sims: dict[str, int], seed: int, jobs: int,
                 only: Sequence[str] = ()) -> None:
    """One table per (profile variant, pace); `sims` by head kind (honest, liar)."""
    rows: list[tuple[Variant, float | None, Head, int]] = []
    for variant in variants(names):
        for pace in paces:
            for head in heads(variant.profile):
                if only and not any(word in head.name for word in only):
                    continue
                rows.append((variant, pace, head, sims["honest" if head.honest else "liar"]))
    tallies = tally_rows(rows, seed, jobs)
    by_name = {(v.label, pace, head.name): t
               for (v, pace, head, _), t in zip(rows, tallies, strict=True)}
    groups: dict[tuple[str, float | None], list[tuple[Variant, Head, Tally]]] = {}
    for (variant, pace, head, _), t in zip(rows, tallies, strict=True):
        groups.setdefault((variant.label, pace), []).append((variant, head, t))
    for (label, pace), members in groups.items():
        variant, box = members[0][0], box_model(members[0][0], pace)
        print(f"\n### {label}, sample pace {'measured' if pace is None else f'{pace:.0f} s'}"
              f"\n\n{pace_header(variant, pace)}\n\n{HEADER}\n{RULE}")
        for _, head, t in members:
            exact = by_name.get((label, pace, head.name.removeprefix(BF16)))
            print(line(variant, head, t, box, exact))
        print(f"\nbox seconds per stage, the mean of the row's evaluations (correctness at round "
              f"one, the reference warm; bench/_box_stages.py)\n\n| head {STAGE_HEADER}\n"
              f"|---|{STAGE_RULE}")
        for _, head, t in members:
            print(f"| {head.name} | {stage_cells(box, t)} |", flush=True)


def add_arguments(ap: argparse.ArgumentParser, profiles: str) -> None:
    """The options both benches share."""
    ap.add_argument("--sims", type=int, default=300, help="evaluations per honest row")
    ap.add_argument("--liar-sims", type=int, default=0,
                    help="evaluations per liar and A/A row (default: 10/3 x --sims: 1000)")
    ap.add_argument("--paces", default="measured", help="sample paces, comma-separated: "
                    "'measured' (each run's fixture) and/or seconds per sample process, "
                    "e.g. measured,25,60,120")
    ap.add_argument("--profiles", default=profiles)
    ap.add_argument("--heads", default="", help="only heads whose name contains one of these "
                    "comma-separated words")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes (1: none)")


def run_from(args: argparse.Namespace, heads: Callable[[Profile], list[Head]]) -> None:
    """The tables the parsed options ask for."""
    paces = [None if p == "measured" else float(p) for p in args.paces.split(",") if p]
    sims = {"honest": args.sims, "liar": args.liar_sims or -(-10 * args.sims // 3)}
    print_tables(heads, [n for n in args.profiles.split(",") if n], paces, sims, args.seed,
                 args.jobs, [w for w in args.heads.split(",") if w])
