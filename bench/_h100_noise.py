"""The witnesses' noise on the H100 that GPU run 53 measured (docs/gpu-e2e.md, "A slowdown hidden
by printing"), for the simulated box (bench/_simbox.py `World.box`): the sparkinfer witness
fixtures are the H200's, whose pair sd is 4-5 times below what the H100's A/As showed.

Read from the run's A/A evaluations (tests/data/sparkinfer/hidden-h100*/aa-speed.results.json:
main against a docs-only head, the shipped profile's witnesses on the cut sweep): per witness the
sd of a pair's saving as a share of main's witness time, pooled over both runs' verified pairs.
The simulated box keeps the H200's paces and applies that relative sd to them (what the rule's
bound, t x main's seconds for the cell's work, meets is the noise relative to the work). A
witness the run did not time gets the largest relative sd of the witnesses it did time of its
cells' kinds (decode, prefill), or its H200 one where larger: an assumption, named in its source.

Boxes: "h200-calibrated", the fixtures' own noise, the job carrying it as the box's calibrated
floor (where the profile's floors are another box's: llamacpp's are 53L's H100); "h100", whose
job carries that noise as the box's calibrated floor (`evalbot calibrate` with its default
pairs: CALIBRATE_PAIRS); "h100-uncalibrated", whose job carries the profile's;
"h100-quiet", the run's third A/A (tests/data/sparkinfer/hidden-h100-fixed, another H100, a day
later), whose witnesses' noise was 4-6 times lower than the first two's, about the H200's: boxes
differ, and only a box's own calibrated floor prices its noise. The noisy H100 is the hard case.

llamacpp's H100 is GPU run 53L's (tests/data/llamacpp/h100-53L/witness-aa.results.json: 16 pairs of
each of the three witnesses, main against main): "h100" and "h100-uncalibrated" take its
relative pair sd; it has no quiet twin. Its samples keep the H200 fixture's noise (53L measured
no A/A of the shipped bench argv). "h100-host2" and "h100-host2-uncalibrated" (llamacpp only):
53L's third evaluation, on a second H100 (tests/data/llamacpp/h100-53L/aa-53.results.json: main
against a docs-only head, 32 pairs of the shipped witness, 16 of each other), whose witnesses'
pair sd was 2.5-10 times 53L's floors; its job carries that noise as the box's calibrated floor,
or the profile's (53L's), as the GPU run did. Its pairs are an evaluation's, not a witness A/A:
the head's binaries are main's (a docs-only change), so their savings are an A/A's, read as the
sparkinfer A/A evaluations are. The paces stay 53L's (that host was ~6% slower a process).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np

from bench import _paces
from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.store.noise import WITNESS_FLOOR

RUNS = ("sparkinfer/hidden-h100/aa-speed", "sparkinfer/hidden-h100-v6/aa-speed")  # GPU run 53's A/As
QUIET_RUNS = ("sparkinfer/hidden-h100-fixed/aa-speed",)  # its third, on another H100
LLAMACPP_RUNS = ("llamacpp/h100-53L/witness-aa",)  # GPU run 53L's witness A/A
HOST2_RUNS = ("llamacpp/h100-53L/aa-53",)  # its third evaluation, on a second H100
# "": the fixtures' own box (the H200), its job carrying the profile's floors; "h200-calibrated":
# the same box, its job carrying the box's own (`evalbot calibrate` on the H200)
BOXES = ("", "h200-calibrated", "h100", "h100-uncalibrated", "h100-quiet", "h100-host2",
         "h100-host2-uncalibrated")
CALIBRATED = ("h200-calibrated", "h100", "h100-quiet", "h100-host2")
CALIBRATE_PAIRS = 12  # `evalbot calibrate --pairs`'s default: a stored floor's pairs


@cache
def relative_sd(runs: tuple[str, ...] = RUNS) -> dict[str, tuple[float, int]]:
    """Witness name -> (pair sd / main's mean witness time, degrees of freedom), pooled over the
    verified pairs of these H100 A/As (their results under tests/data/, less the suffix)."""
    sums: dict[str, list[float]] = {}
    for run in runs:
        doc = json.loads((_paces.DATA / f"{run}.results.json").read_text())
        for w in doc["witnesses"]:
            d = pair_savings(w["samples"], need_verified=True) if w["source"] == "witness" else []
            if len(d) < 2:
                continue
            base = float(np.mean([s["seconds"] for s in w["samples"] if s["side"] == "base"]))
            acc = sums.setdefault(w["name"], [0.0, 0.0])
            acc[0] += (len(d) - 1) * (float(np.std(d, ddof=1)) / base) ** 2
            acc[1] += len(d) - 1
    return {name: (math.sqrt(v / df), int(df)) for name, (v, df) in sums.items()}


def runs_of(box: str, profile: str) -> tuple[str, ...]:
    """The H100 A/As whose witness noise `box` takes for `profile`'s witnesses."""
    if profile == "llamacpp" and box == "h100-quiet":
        raise ValueError("no quiet H100 for llamacpp: GPU run 53L is its only H100 A/A")
    if box.startswith("h100-host2"):
        if profile != "llamacpp":
            raise ValueError(f"{box}: the second H100 timed llamacpp's witnesses only")
        return HOST2_RUNS
    if profile == "llamacpp":
        return LLAMACPP_RUNS
    return QUIET_RUNS if box == "h100-quiet" else RUNS


def witness(box: str, h200: _paces.WitnessPace, spec: WitnessSpec,
            profile: str = "sparkinfer") -> _paces.WitnessPace:
    """`h200`, the witness's fixture pace, with the H100's noise."""
    if box not in BOXES:
        raise ValueError(f"unknown box {box!r}: one of {BOXES}")
    if box in ("", "h200-calibrated"):
        return h200
    runs = runs_of(box, profile)
    rel, where = relative_sd(runs), ", ".join(f"tests/data/{r}" for r in runs)
    if spec.name in rel:
        return replace(h200, pair_sd_s=rel[spec.name][0] * h200.seconds,
                       source=f"{h200.source}; the H100's relative pair sd ({where})")
    kinds = {key.rsplit("/", 1)[-1].split("@")[0] for key in spec.cells}
    share = max([h200.pair_sd_s / h200.seconds] +
                [r for name, (r, _) in rel.items() if name.split("-", 1)[0] in kinds])
    return replace(h200, pair_sd_s=share * h200.seconds,
                   source=f"{_paces.ASSUMED}: the largest relative pair sd of a witness of its "
                          f"cells' kinds the H100 timed ({where}), or the H200's own")


def calibrated(box: str, runs: list[Any],
               pace: Callable[[Any, WitnessSpec], _paces.WitnessPace],
               ) -> tuple[dict[str, float], int | None]:
    """(the box's calibrated witness floors as make_job's `sd_floors`, their df) where the box
    calibrated (CALIBRATED): each witness's simulated pair sd (`pace`: World.witness); else none."""
    if box not in CALIBRATED:
        return {}, None
    return ({WITNESS_FLOOR + spec.name: pace(run, spec).pair_sd_s
             for run in runs for spec in run.witnesses}, CALIBRATE_PAIRS - 1)
