"""The witnesses of bench/witness_quality.py and one row of it: simulated witness processes through
the harness's real measurement (engine.measure.witness.measure) and the bot's real judgement
(evalbot.grading.confirmation.judge).

A witness cell is one shipped witness and one cell it covers, with main's time for the witness
and for that cell's work: the witness's measured time (bench/_paces.py), each covered cell's
part of it its tokens at the run's measured rate, scaled down where they exceed it (as
bench/_simbox.py splits it). A witness with no fixture (the demo's) takes main's time from
ASSUMED_MAIN_S, marked assumed.

The processes' output is shortened to two ids (the spec's prompt and steps with it) and their
argv to one word: what the harness checks of them plays no part in the statistics here, and
reading ~1,000 step lines a process would make the bench 50 times slower. Its times, looks,
stops and judgement are the real ones.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench import _paces
from bench._simbox import POLICY, World, rate, render, seeded_prompts
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.witness_spec import STEP, WitnessSpec
from evalbot.engine.measure import witness
from evalbot.evaluation.jobspec import make_job
from evalbot.evaluation.profile import load_profile
from evalbot.grading import confirmation

NOISE = (1, 2, 3)  # the box's noise as a multiple of the witness's floor
EDGES = {"XS": 0.02, "S": 0.035, "M": 0.06, "L": 0.10, "XL": 0.18}  # the policy's tier edges
NO_SAVING_CLAIM = EDGES["XS"]  # what an improved cell claims at least
# main's witness time where no fixture measured it: the demo's witnesses on a 2-core machine
# beside 4 busy loops (scripts/demo_witness_floor.py --pairs 16, demo profile v6's comments:
# main 0.19, 0.24 and 1.0 CPU-s)
ASSUMED_MAIN_S = {("demo", "decode-64"): 0.19, ("demo", "prefill-1024"): 0.24,
                  ("demo", "decode-1024"): 1.0}
# a known-sd test spending all of alpha (0.005) at the last look has 95% power only above
# this many sds of the mean saving: z(0.995) + z(0.95)
VISIBLE_Z = 2.5758 + 1.6449


@dataclass(frozen=True)
class WitnessCell:
    profile: str
    witness: str
    cell: str  # the covered cell whose claim is judged
    spec: WitnessSpec  # as the job carries it
    main_s: float | None  # main's witness time, by its clock (None: not known)
    shares: dict[str, float]  # covered cell -> main's time for its work in one process
    metric: str
    assumed: bool

    @property
    def name(self) -> str:
        return f"{self.witness} {self.cell}"

    @property
    def floor_s(self) -> float:
        return self.spec.sd_floor_s

    @property
    def floor_df(self) -> int:
        return self.spec.floor_df

    @property
    def looks(self) -> tuple[int, ...]:
        return self.spec.looks

    @property
    def known(self) -> bool:
        """Is main's time known (measured or assumed)? Only then are the honest rows run."""
        return self.main_s is not None

    @property
    def main_or_nominal_s(self) -> float:
        """main's time; where not known, 100 floors: the no-saving rows need one only for the
        0.1%-of-main's-time floor on the sd, which it leaves at a tenth of the noise."""
        return self.main_s if self.main_s is not None else 100 * max(self.floor_s, 1e-3)

    def saving(self, edge: str) -> float:
        """main's time less the head's for the cell's work at the tier's lower edge (prefill:
        the reduction of the time to first token)."""
        gain, share = EDGES[edge], self.shares[self.cell]
        return share * gain if self.metric == "prefill" else share * (1 - 1 / (1 + gain))

    def visible(self, edge: str) -> bool:
        """Could any rule confirm it in 95%? Not where it is under VISIBLE_Z sds of the mean
        at the last look (nor where main's time is not known)."""
        return self.known and \
            self.saving(edge) * math.sqrt(self.looks[-1]) >= VISIBLE_Z * self.floor_s


@dataclass(frozen=True)
class Counted:
    hits: int
    n: int

    @property
    def share(self) -> float:
        return self.hits / self.n if self.n else 0.0


@dataclass(frozen=True)
class Row:
    null: dict[int, Counted]
    honest: dict[str, Counted]
    pairs_at_s: float


def shipped_cells(profiles: list[str]) -> list[WitnessCell]:
    """Every covered cell of every witness of the shipped profiles, as make_job builds them."""
    out = []
    for name in profiles:
        profile = load_profile(name)
        box = BoxConfig(name="sim", kind="local", workdir="/tmp", repo="/tmp")
        job = make_job(replace(profile, correctness=None), POLICY, box, "0" * 40, "1" * 40,
                       seed=1, job_id="sim")
        for run in job.runs:
            cells = {c.key: c for c in run.cells}
            for spec in run.witnesses:
                main_s, total, assumed = _main(name, run.model, spec)
                pace = World(name).run(run)
                share = {k: t / rate(pace, cells[k]) for k, t in spec.cells.items()}
                scale = min(1.0, total / sum(share.values()))
                share = {k: scale * v for k, v in share.items()}
                out += [WitnessCell(name, spec.name, key, spec, main_s, share,
                                    cells[key].metric, assumed) for key in spec.cells]
    return out


def _main(profile: str, model: str, spec: WitnessSpec) -> tuple[float | None, float, bool]:
    """(main's time by the witness's clock, the part its cells' work may take, assumed?); None:
    not known (a witness with neither fixture nor assumption: its honest rows are not run)."""
    try:
        pace = _paces.witness_pace(profile, model, spec)
    except KeyError:
        seconds = ASSUMED_MAIN_S.get((profile, spec.name))
        return seconds, seconds or 0.0, True
    return pace.seconds, pace.wall_s - pace.load_s, pace.assumed


def simulate(wc: WitnessCell, rule: int, sims: int, seed: int) -> Row:
    """The no-saving head at each noise and the honest heads at 1x, `sims` evaluations each;
    every head of a row sees the same draws (seeded alike), under either rule."""
    spec = _quick(confirmation.with_stops(wc.spec, POLICY.alpha, rule))
    null, honest, pairs_s = {}, {}, 0.0
    claim = wc.saving("XS") if wc.known else 0.02 * wc.main_or_nominal_s
    with tempfile.TemporaryDirectory(prefix="witness-quality-") as tmp:
        for k in NOISE:
            null[k] = _count(spec, wc, 0.0, claim, k, sims, seed, Path(tmp))[0]
        for edge in EDGES if wc.known else ():
            saving = wc.saving(edge)
            honest[edge], pairs = _count(spec, wc, saving, saving, 1, sims, seed, Path(tmp))
            pairs_s = pairs if edge == "S" else pairs_s
    return Row(null, honest, pairs_s)


def _count(spec: WitnessSpec, wc: WitnessCell, saving_s: float, claim_s: float, k: int,
           sims: int, seed: int, tmp: Path) -> tuple[Counted, float]:
    """(confirmed evaluations, mean pairs) of a head saving `saving_s` a process in the cell
    and claiming `claim_s`, the pair's noise k x the floor."""
    claims = {c: (claim_s if c == wc.cell else 0.0, s) for c, s in wc.shares.items()}
    stop = witness.stop_for(claims, [wc.cell])
    alpha = confirmation.confirm_alpha(POLICY.alpha, 1)  # as confirmation.confirm judges
    sd = k * wc.floor_s / math.sqrt(2)  # per process: a pair's difference has k x the floor
    output, main_s = _output(spec), wc.main_or_nominal_s
    rng = np.random.default_rng(seed)
    hits = pairs = 0
    with seeded_prompts(seed):
        for _ in range(sims):
            def launch(side: str, argv: list[str], timeout_s: float,
                       prompt: list[int]) -> witness.Timed:
                t = main_s - (saving_s if side == "head" else 0.0) + rng.normal(0.0, sd)
                return witness.Timed(True, output, t, False, "", t)

            record = witness.measure(spec, lambda a, s: a, launch, tmp, warmup=0, stop=stop)
            judged = confirmation.judge(record.to_dict(), claims, alpha)
            hits += judged["cells"].get(wc.cell, {}).get("status") == "confirmed"
            pairs += len(record.samples) // 2
    return Counted(hits, sims), pairs / max(sims, 1)


def _quick(spec: WitnessSpec) -> WitnessSpec:
    """The spec with a two-id output and a one-word argv (module docstring): the same clock,
    looks and values."""
    if spec.output.get("kind") == "step_lines":
        return replace(spec, argv=["witness"], prompt_tokens=1, steps=1, output_tokens=2)
    return replace(spec, argv=["witness"], prompt_tokens=1, output_tokens=1)


def _output(spec: WitnessSpec) -> str:
    """main's (and every honest head's) output for the quick spec."""
    if spec.output.get("kind") == "step_lines":
        return "".join(f"{STEP}{i}\n" for i in range(spec.output_tokens))
    return render(spec.output, list(range(spec.output_tokens)))


def stale_samples(main_s: np.ndarray) -> list[dict[str, object]]:
    """A witness record's samples with main's times `main_s`, one a pair in ABBA order (the
    head's, which the stale-floor test never reads, a fixed 5% faster)."""
    out: list[dict[str, object]] = []
    for p, t in enumerate(main_s):
        sides = (("base", t), ("head", 0.95 * t))
        out += [{"pair": p, "side": side, "seconds": float(s), "dropped": False, "error": ""}
                for side, s in (sides if p % 2 == 0 else sides[::-1])]
    return out
