"""The llamacpp candidate of issue 53 ("one clock"): a profile plus a witness for each cell it
leaves "regressions only", every cell witnessed (design B). GPU run 53L measured it and the
shipped llamacpp.yaml carries it since version 7 (with 53L's floors): on the shipped profile
`--depth-witnesses` adds nothing, and `--calibrate-from-aa` replaces the floors with the run's.

    decode-0              `evalbot-topk witness MODEL 1 255`: a 1-id prompt at position 0, then
                          255 steps at positions 1..255 (llama-bench's tg256 at depth 0)
    prefill-4096-at-4096  `evalbot-topk witness MODEL 4096 1 4096`: 4096 fixed ids filled before
                          READY, the timed 4096-id prompt at positions 4096.., one step
                          (pp4096 at depth 4096)

Added to a profile without them, their floors are UNMEASURED: without the run's own witness A/A
they carry none (each judged on its own sd alone, the contract's "0: no floor"), never a guessed
one; with it (`floors_of`), every witness's floor, the shipped one's too, is the sd of that A/A's
per-pair saving, as `evalbot calibrate --witnesses` stores it.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

TOOL = "{build}/evalbot-out/evalbot-topk"
LOOKS = [3, 5, 8, 16]  # the shipped witness's looks
DEPTH_WITNESSES: list[dict[str, Any]] = [
    {"name": "decode-0", "argv": [TOOL, "witness", "{model}", "1", "255"], "clock": "handoff",
     "prompt_tokens": 1, "steps": 255, "output": {"kind": "step_lines"}, "output_tokens": 256,
     "cells": {"decode@0": 255}, "pairs": LOOKS, "min_agreement": 0.5, "timeout_s": 120},
    {"name": "prefill-4096-at-4096", "argv": [TOOL, "witness", "{model}", "4096", "1", "4096"],
     "clock": "handoff", "prompt_tokens": 4096, "steps": 1, "output": {"kind": "step_lines"},
     "output_tokens": 2, "cells": {"prefill@4096": 4096}, "pairs": LOOKS, "min_agreement": 0.5,
     "timeout_s": 120},
]
AA_NAME = "llama-witness-aa"  # the runner's evaluation that measures them (catalogue.py)
AA_PAIRS = 16  # the witness A/A's pairs: 15 degrees of freedom per floor


def with_depth_witnesses(doc: dict[str, Any]) -> dict[str, Any]:
    """The candidate: the two witnesses on the run that has their cells (those it lacks: the
    shipped profile has both since version 7), every cell witnessed."""
    doc["speed"]["witness_every_cell"] = True
    [run] = doc["speed"]["runs"]
    keys = {f"{c['metric']}@{c['ctx']}" for c in run["cells"]}
    present = {w["name"] for w in run["witnesses"]}
    for w in DEPTH_WITNESSES:
        missing = set(w["cells"]) - keys
        if missing:
            raise ValueError(f"witness {w['name']}: no cell {', '.join(sorted(missing))} in the run")
        if w["name"] not in present:
            run["witnesses"].append(copy.deepcopy(w))
    return doc


# The calibration's llama-bench: its cells' A/A is thrown away (only the witnesses' floors are
# kept), so a process is cut to pp512 and tg16 at the same depths, one repetition (the parser
# matches a cell by its depth and test kind, not the sizes): about the model load, ~2 s on the
# H200 against the shipped 9.25 s, and the A/A's box time is the witnesses'.
CUT_BENCH = {"-p": "512", "-n": "16", "-r": "1"}


def for_witness_aa(doc: dict[str, Any]) -> dict[str, Any]:
    for run in doc["speed"]["runs"]:
        argv = run["argv"]
        for flag, value in CUT_BENCH.items():
            argv[argv.index(flag) + 1] = value
        run["decode_tokens"] = int(CUT_BENCH["-n"])
    return doc


def floors_of(results: dict[str, Any]) -> dict[str, tuple[float, int]]:
    """witness name -> (sd of a pair's saving in seconds, pairs) from an A/A's results
    (evalbot.service.calibrate.witness_noise, the production calibration's own reading)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from evalbot.evaluation.jobspec import WITNESS_FLOOR
    from evalbot.service.calibrate import witness_noise

    return {key[len(WITNESS_FLOOR):]: sd_n for key, sd_n in witness_noise(results).items()}


def work_of(results: dict[str, Any]) -> dict[str, float]:
    """witness name -> main's median seconds a process on the witness's clock (both sides are
    main in an A/A), for the new shapes only: their timed span is their one cell's work (a
    1-id prompt and 255 steps; a 4096-id prefill and one step). The shipped witness's span also
    holds a prefill its cell does not credit, so it is left without, as shipped."""
    import numpy as np

    new = {w["name"] for w in DEPTH_WITNESSES}
    return {w["name"]: float(np.median([s["seconds"] for s in w["samples"]
                                        if not s["dropped"] and s.get("verified")]))
            for w in results.get("witnesses") or []
            if w.get("source") == "witness" and w["name"] in new}


def with_floors(doc: dict[str, Any], floors: dict[str, tuple[float, int]],
                work: dict[str, float]) -> dict[str, Any]:
    """Each witness the A/A measured gets its sd as the floor, pairs - 1 degrees of freedom, and
    a new one its `work_s`: with the floor, what sizes its last look where it must rule a 2%
    slowdown out (evalbot/grading/witness_sizing.py; without it, rule 2's fixed looks)."""
    for run in doc["speed"]["runs"]:
        for w in run.get("witnesses", []):
            if w["name"] in work:
                w["work_s"] = round(work[w["name"]], 4)
            if w["name"] in floors:
                sd, n = floors[w["name"]]
                w["sd_floor_s"], w["floor_df"] = round(sd, 4), n - 1
                print(f"witness {w['name']}: floor {sd:.4f} s over {n} pairs, work_s "
                      f"{w.get('work_s', '-')} (the A/A's)", file=sys.stderr)
            elif "sd_floor_s" not in w:
                print(f"witness {w['name']}: floor UNMEASURED (own sd only)", file=sys.stderr)
    return doc


def results_of(*paths: Path) -> dict[str, Any] | None:
    """The first of the A/A results files that exists: this run's, else one an earlier session
    measured and the lead carried in shared/ (the device's state is gone with its machine)."""
    import json

    found = next((p for p in paths if p.is_file()), None)
    if found is not None:
        print(f"witness floors from {found}", file=sys.stderr)
    return json.loads(found.read_text()) if found is not None else None
