"""Box time per verdict kind: what one evaluation costs the box, stage by stage, per model.

Per variant (sparkinfer's qwythos-9b alone, qwen3.6-35b-a3b alone, both as the shipped profile,
and llamacpp) and verdict kind:
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
and the shipped profiles (bench/_box_stages.py). "as named": the simulated evaluations whose
speed verdict is the row's (neutral, a tier, no tier). The reference is 0 on a warmed box; its
cold cost and the total with it close the row. A GPU run of the shipped profile is the judge.

Usage: python bench/box_time.py [--sims 50] [--seed 1] [--jobs N]   (13 s on 2 busy cores)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _gpu_fixtures, _rows, _score_cost  # noqa: E402
from bench._box_stages import Evaluation  # noqa: E402
from bench._rows import Tally, Variant  # noqa: E402
from bench._simbox import Head, one_model, shipped  # noqa: E402

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


def variants() -> list[Variant]:
    spark = shipped("sparkinfer")
    return [*(Variant(m.name, one_model(spark, m.name), "sparkinfer") for m in spark.models),
            Variant("sparkinfer (both models)", spark, "sparkinfer"),
            Variant("llamacpp", shipped("llamacpp"), "llamacpp")]


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


def rows(sims: int, seed: int, jobs: int) -> list[Row]:
    """Every variant's kinds; the simulations of a head shared by the kinds that use it."""
    tasks = [(v, None, head, sims) for v in variants() for head in heads(v).values()]
    tallies = dict(zip(((v.label, h.name) for v, _, h, _ in tasks),
                       _rows.tally_rows(tasks, seed, jobs), strict=True))
    out = []
    for v in variants():
        box, by_kind = _rows.box_model(v, None), heads(v)
        looks = len(box.side_rounds)
        for kind in KINDS:
            t = tallies[v.label, by_kind[kind.head].name]
            out.append(Row(v.label, kind, t, named(kind.head, t), box,
                           looks if kind.last_look else 1))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=50, help="simulated evaluations per head")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes (1: none)")
    args = ap.parse_args(argv)
    started = time.monotonic()
    print(f"\n### box time per verdict kind (seconds; {args.sims} simulated evaluations a head)"
          f"\n\n| model | verdict | as named {_rows.STAGE_HEADER}\n|---|---|---:|"
          f"{_rows.STAGE_RULE}")
    for r in rows(args.sims, args.seed, args.jobs):
        print(f"| {r.variant} | {r.kind.name} | {r.named}/{r.tally.n} | "
              f"{_rows.stage_cells(r.box, r.tally, r.rounds)} |")
    print(notes())
    print(f"\n({time.monotonic() - started:.0f} s)")


def notes() -> str:
    """The modelled stages' inputs, as the fixtures give them."""
    lines = [f"\nbuilds (2 sides): {', '.join(f'{f} {_gpu_fixtures.builds_s(f):.0f} s' for f in FIXTURES)}; "
             f"rest {_gpu_fixtures.rest_s():.1f} s"]
    return "\n".join([*lines, *(_score_cost.describe(f) for f in FIXTURES)])


if __name__ == "__main__":
    main()
