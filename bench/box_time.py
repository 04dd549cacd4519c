"""Box time per verdict kind: what one evaluation costs the box, stage by stage, per model.

Per variant (sparkinfer's qwythos-9b alone, qwen3.6-35b-a3b alone, both as the shipped profile,
and llamacpp; or, with --profile, each model of the given profile alone and all of them) and
verdict kind:
  A/A neutral              an A/A (head = main): speed neutral, correctness bit-identical at
                           round one
  honest tier              the variant's first model faster by 5% in every cell
                           (bench/_rows.py): a tier, its witnesses run; correctness round one
  liar, no tier            prints 1.1x its rates on every cell: its witnesses contradict it;
                           correctness round one
  REJECT at round one      an A/A's speed; correctness rejects at its first look
  inconclusive correctness an A/A's speed; correctness undecided to its last look
Measuring and witnesses: the mean of --sims evaluations of the real harness on the simulated
box at the fixtures' paces (bench/_simbox.py); the other stages modelled from the GPU fixtures
and the profile (bench/_box_stages.py). "as named": the simulated evaluations whose speed
verdict is the row's (neutral, a tier, no tier). The reference is 0 on a warmed box; its cold
cost and the total with it close the row. A GPU run of the profile is the judge:
--measured RESULTS... prints, per results file of a run of that profile, the model against it
stage by stage: the verdict kind's row (A/A neutral, or honest tier for a run that got a tier)
and the head as measured (the cells the run found changed, at their measured gain), with the
run's own builds (the sides the cache did not serve) and reference (warm: its cache's).

--head KEY=GAIN (repeatable, e.g. qwythos-9b/decode@128=0.09) adds a row for an honest head
that is faster by GAIN on those cells alone (the GPU fixtures' honest heads: decode +9% at 128,
prefill at 64k), in the first variant that runs its models.

Usage: python bench/box_time.py [--sims 50] [--seed 1] [--jobs N]   (35 s on 2 busy cores)
       python bench/box_time.py --profile tests/data/sparkinfer/verdict-cost-h100/profile.yaml \
           --measured tests/data/sparkinfer/verdict-cost-h100/{aa,prefill-4k}.results.json   (7 s)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _gpu_fixtures, _paces, _rows, _score_cost, _simbox  # noqa: E402
from bench._box_stages import Evaluation, Stages  # noqa: E402
from bench._rows import Tally, Variant  # noqa: E402
from bench._simbox import Head, one_model, shipped  # noqa: E402
from evalbot.engine.measure.speed import SIDES  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading.box_time import STAGES, box_time  # noqa: E402

HONEST, LIAR = "every cell +5%", "lie 1.1x all"
FIXTURES = ("sparkinfer", "llamacpp")


@dataclass(frozen=True)
class Kind:
    name: str
    head: str  # "aa", "honest" or "liar"
    last_look: bool  # correctness to its last look (else round one)


KINDS = (Kind("A/A neutral", "aa", False), Kind("honest tier", "honest", False),
         Kind("liar, no tier", "liar", False), Kind("REJECT at round one", "aa", False),
         Kind("inconclusive correctness at the last look", "aa", True))


@dataclass(frozen=True)
class Row:
    variant: str
    kind: Kind
    tally: Tally
    named: int  # evaluations whose speed verdict is the kind's
    box: Evaluation
    rounds: int


def variants(profile: Profile | None = None, fixtures: str | None = None) -> list[Variant]:
    """The shipped profiles' variants; or, given a profile, its models alone and (more than
    one) all of them, at `fixtures`' paces (by default the shipped profile running its models)."""
    if profile is None:
        spark = shipped("sparkinfer")
        return [*(Variant(m.name, one_model(spark, m.name), "sparkinfer") for m in spark.models),
                Variant("sparkinfer (both models)", spark, "sparkinfer"),
                Variant("llamacpp", shipped("llamacpp"), "llamacpp")]
    fx = fixtures or fixtures_of(profile)
    if len(profile.models) == 1:
        return [Variant(f"{profile.name}: {profile.models[0].name}", profile, fx)]
    return [*(Variant(f"{profile.name}: {m.name}", one_model(profile, m.name), fx)
              for m in profile.models),
            Variant(f"{profile.name} (all models)", profile, fx)]


def fixtures_of(profile: Profile) -> str:
    """The shipped profile whose fixtures pace this one: the first that runs one of its models."""
    names = {m.name for m in profile.models}
    for f in FIXTURES:
        if names & {m.name for m in shipped(f).models}:
            return f
    raise SystemExit(f"no fixtures pace a model of {profile.name}: give --fixtures")


def heads(variant: Variant) -> dict[str, Head]:
    first = variant.profile.models[0].name
    return {"aa": _rows.AA,
            "honest": next(h for h in _rows.honest_heads(variant.profile, bf16=False)
                           if h.name == f"{first} {HONEST}"),
            "liar": next(h for h in _rows.liar_heads(variant.profile) if h.name == LIAR)}


def named(kind: str, t: Tally) -> int:
    """How many of the evaluations got the speed verdict the row is named for."""
    if kind == "aa":
        return t.n - t.inconclusive - t.false
    return t.tier if kind == "honest" else t.n - t.tier


def rows(sims: int, seed: int, jobs: int, chosen: list[Variant] | None = None) -> list[Row]:
    """Every variant's kinds; the simulations of a head shared by the kinds that use it."""
    chosen = chosen or variants()
    tasks = [(v, None, head, sims) for v in chosen for head in heads(v).values()]
    tallies = dict(zip(((v.label, h.name) for v, _, h, _ in tasks),
                       _rows.tally_rows(tasks, seed, jobs), strict=True))
    out = []
    for v in chosen:
        box, by_kind = _rows.box_model(v, None), heads(v)
        looks = len(box.side_rounds)
        for kind in KINDS:
            t = tallies[v.label, by_kind[kind.head].name]
            out.append(Row(v.label, kind, t, named(kind.head, t), box,
                           looks if kind.last_look else 1))
    return out


# --- the model against a GPU run's results ---

CHANGED = ("improved", "improving", "regressed", "slower")


def measured_head(doc: dict[str, Any]) -> Head:
    """The head a results file measured: each cell its run found changed, at the geometric mean
    of its pairs' PR/main rates; none: the A/A."""
    real = {}
    for c in doc["cells"]:
        if c["looks"] and c["looks"][-1]["decision"] in CHANGED:
            pairs = _paces._pairs((s["pair"], s["side"], s["value"]) for s in c["samples"]
                                  if not s["dropped"])
            real[f"{c['model']}/{c['metric']}@{c['ctx']}"] = \
                math.exp(sum(math.log(h / b) for b, h in pairs) / len(pairs))
    if not real:
        return _rows.AA
    gains = {k: f - 1 for k, f in real.items()}
    best = max((_simbox.true_tier(k.rsplit("/", 1)[1].split("@")[0], g) or "none"
                for k, g in gains.items()), key=lambda t: _simbox.RANK.get(t, 0))
    return Head("as measured: " + ", ".join(f"{k} {100 * g:+.1f}%" for k, g in gains.items()),
                real=real, true_tier=None if best == "none" else best)


@dataclass(frozen=True)
class Comparison:
    name: str  # the results file's
    row: Row  # the verdict kind's row of the table
    modelled: Stages  # the head as measured, with the run's builds and reference
    measured: dict[str, float | None]
    head: str


def comparisons(files: list[Path], variant: Variant, table: list[Row], sims: int, seed: int,
                jobs: int) -> list[Comparison]:
    """Each results file against the model of `variant` (the profile that ran it)."""
    docs = [json.loads(f.read_text()) for f in files]
    measured = [measured_head(d) for d in docs]
    fresh = {h.name: h for h in measured if h is not _rows.AA}
    tallies = dict(zip(fresh, _rows.tally_rows([(variant, None, h, sims) for h in fresh.values()],
                                               seed, jobs), strict=True))
    box = _rows.box_model(variant, None)
    out = []
    for f, doc, head in zip(files, docs, measured, strict=True):
        kind = "A/A neutral" if head is _rows.AA else "honest tier"
        row = next(r for r in table if r.variant == variant.label and r.kind.name == kind)
        c = doc.get("correctness") or {}
        rounds = len(c.get("looks") or []) or 1
        warm = not c or bool((c.get("reference") or {}).get("cached"))
        stages = _rows.stages(box, tallies.get(head.name, row.tally), rounds, warm)
        built = sum(not doc[s]["cached"] for s in SIDES)
        stages = Stages({**stages.seconds,
                         "builds": built * _gpu_fixtures.build_s(variant.fixtures)})
        out.append(Comparison(f.name, row, stages, box_time(doc).stages, head.name))
    return out


def named_head(spec: str) -> Head:
    """A head from `KEY=GAIN[,KEY=GAIN...]`: honest, those cells faster by GAIN."""
    try:
        gains = {k: float(g) for k, g in (part.split("=") for part in spec.split(","))}
    except ValueError:
        raise SystemExit(f"--head {spec!r}: give KEY=GAIN, e.g. qwythos-9b/decode@128=0.09") from None
    tiers = [_simbox.true_tier(k.rsplit("/", 1)[-1].split("@")[0], g) for k, g in gains.items()]
    best = max(tiers, key=lambda t: _simbox.RANK.get(t or "none", 0))
    return Head("honest: " + ", ".join(f"{k} {100 * g:+.0f}%" for k, g in gains.items()),
                real={k: 1 + g for k, g in gains.items()}, true_tier=best)


def head_rows(specs: list[str], chosen: list[Variant], sims: int, seed: int,
              jobs: int) -> list[str]:
    """The table's row for each named head, in the first variant that runs its models: its
    stages, and how many got a tier."""
    tasks = []
    for head in (named_head(s) for s in specs):
        models = {k.split("/")[0] for k in head.real}
        variant = next((v for v in chosen if models <= {m.name for m in v.profile.models}), None)
        if variant is None:
            raise SystemExit(f"--head {head.name}: no variant runs {', '.join(sorted(models))}")
        tasks.append((variant, None, head, sims))
    return [f"| {v.label} | {h.name} | {t.tier}/{t.n} tiered | "
            f"{_rows.stage_cells(_rows.box_model(v, None), t)} |"
            for (v, _, h, _), t in zip(tasks, _rows.tally_rows(tasks, seed, jobs), strict=True)]


def comparison_table(c: Comparison) -> str:
    """Stage by stage: the kind's row, the head as measured, the run; "<-" where the run and the
    head as measured differ by more than a quarter (and 5 s)."""
    row = _rows.stages(c.row.box, c.row.tally, c.row.rounds)
    lines = [f"\n{c.name} against the model ({c.head}; builds: the sides the run built)\n",
             f"| stage | {c.row.kind.name} row | head as measured | measured | |",
             "|---|---:|---:|---:|---|"]
    for k in (*STAGES, "total"):
        a, b = (row.total, c.modelled.total) if k == "total" else \
            (row.seconds[k], c.modelled.seconds[k])
        m = sum(v or 0.0 for v in c.measured.values()) if k == "total" else c.measured[k]
        off = m is not None and abs(m - b) > max(5.0, 0.25 * max(m, b))
        lines.append(f"| {k} | {a:.1f} | {b:.1f} | {'?' if m is None else f'{m:.1f}'} | "
                     f"{'<-' if off else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=50, help="simulated evaluations per head")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes (1: none)")
    ap.add_argument("--profile", type=Path, help="a profile YAML to model instead of the shipped "
                    "ones (e.g. the one a GPU run used)")
    ap.add_argument("--fixtures", choices=FIXTURES, help="whose paces and fitted costs apply to "
                    "--profile (default: the shipped profile running its models)")
    ap.add_argument("--measured", type=Path, nargs="+", default=[], metavar="RESULTS",
                    help="results files of a run of --profile: the model against each")
    ap.add_argument("--head", action="append", default=[], metavar="KEY=GAIN",
                    help="a row for an honest head faster on these cells (repeatable)")
    args = ap.parse_args(argv)
    if args.measured and not args.profile:
        ap.error("--measured needs the --profile that run used")
    started = time.monotonic()
    profile = load_profile(str(args.profile)) if args.profile else None
    chosen = variants(profile, args.fixtures)
    print(f"\n### box time per verdict kind (seconds; {args.sims} simulated evaluations a head"
          f"{f'; {args.profile}' if args.profile else ''})"
          f"\n\n| model | verdict | as named {_rows.STAGE_HEADER}\n|---|---|---:|"
          f"{_rows.STAGE_RULE}")
    table = rows(args.sims, args.seed, args.jobs, chosen)
    for r in table:
        print(f"| {r.variant} | {r.kind.name} | {r.named}/{r.tally.n} | "
              f"{_rows.stage_cells(r.box, r.tally, r.rounds)} |")
    for line in head_rows(args.head, chosen, args.sims, args.seed, args.jobs):
        print(line)
    print(notes(sorted({v.fixtures for v in chosen}, key=FIXTURES.index)))
    for c in comparisons(args.measured, chosen[-1], table, args.sims, args.seed, args.jobs):
        print(comparison_table(c))
    print(f"\n({time.monotonic() - started:.0f} s)")


def notes(fixtures: list[str] | None = None) -> str:
    """The modelled stages' inputs, as the fixtures give them."""
    fixtures = fixtures or list(FIXTURES)
    builds = ", ".join(f"{f} {_gpu_fixtures.build_s(f):.1f} s a side" for f in fixtures)
    lines = [f"\nbuilds: {builds}; rest {_gpu_fixtures.rest_s():.1f} s"]
    return "\n".join([*lines, *(_score_cost.describe(f) for f in fixtures)])


if __name__ == "__main__":
    main()
