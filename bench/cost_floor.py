"""The cost floors of the shipped profiles (`speed.runs[].cost_floor`): per run, the sd of a
pair's time unaccounted for by the printed rates (evalbot/grading/unexplained_cost.py), pooled
over the recorded results under tests/data/ of that profile's runs (each file's pairs about their
own mean: a head's real change of its untimed work is no noise), with its degrees of freedom.

Usage: python bench/cost_floor.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evalbot.engine.contract.shared.wall_clock import pair_costs  # noqa: E402

DATA = ROOT / "tests" / "data"


def per_run() -> dict[tuple[str, str], list[tuple[str, np.ndarray]]]:
    """(profile, samples witness) -> [(fixture, u per pair)] of every recorded results file."""
    out: dict[tuple[str, str], list[tuple[str, np.ndarray]]] = {}
    for path in sorted(DATA.rglob("*.results.json")):
        doc = json.loads(path.read_text())
        records = {f"{c['model']}/{c['metric']}@{c['ctx']}": c for c in doc["cells"]}
        for w in doc.get("witnesses") or []:
            if w.get("source") == "samples":
                u = pair_costs(w, records)
                if len(u) >= 2:
                    key = (doc["profile"], f"{w['name']} {','.join(sorted(w['cells']))}")
                    out.setdefault(key, []).append((str(path.relative_to(DATA)), u))
    return out


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0]).parse_args(argv)
    print("| profile | run (samples witness: cells) | fixtures | pairs | pooled sd s | df |")
    print("|---|---|---:|---:|---:|---:|")
    for (profile, run), rows in per_run().items():
        ss = sum(float(np.sum((u - u.mean()) ** 2)) for _, u in rows)
        df = sum(len(u) - 1 for _, u in rows)
        print(f"| {profile} | {run} | {len(rows)} | {sum(len(u) for _, u in rows)} | "
              f"{math.sqrt(ss / df):.4f} | {df} |")
        for name, u in rows:
            print(f"|  | {name} | | {len(u)} | {float(np.std(u, ddof=1)):.4f} | {len(u) - 1} |")


if __name__ == "__main__":
    main()
