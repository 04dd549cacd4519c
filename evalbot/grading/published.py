"""Which of the PR's figures a verdict publishes: none the bot does not believe (issue 31).

A rate the PR's bench tool prints is the PR's own text, so it can carry anything the PR read on
the box (a port, an address) as its digits. For a cell the harness's clock did not back
(`unconfirmed`, `spoofed`, a witness that contradicted or did not confirm it), the verdict keeps
neither the PR's figures nor the change computed from them: the comment says "not believed".
Elsewhere the PR's figure is main's figure times the measured change, to 3 significant digits,
so no digit past the third carries anything. The claimed saving of a witness (seconds, from the
PR's rates) is kept to the 2 decimals the comment shows. Pure, like the rest of the grading.
"""

from __future__ import annotations

import math
from typing import Any

NOT_BELIEVED = ("spoofed", "unconfirmed")
CHANGE = ("speedup", "lo", "hi", "sim_lo", "sim_hi", "eq_lo", "eq_hi")


def believed(cell: dict[str, Any]) -> bool:
    """A faster cell the witness did not back was made `unconfirmed` or `spoofed` by then
    (confirmation.confirm); a cell that claims no gain needs no witness."""
    return cell["decision"] not in NOT_BELIEVED


def sig3(x: float | None) -> float | None:
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return round(x, 2 - int(math.floor(math.log10(abs(x)))))


def publish(cells: list[dict[str, Any]], witnesses: list[dict[str, Any]]) -> None:
    """In place, once the cells are decided and tiered: the figures a verdict may carry."""
    hidden = set()
    for cell in cells:
        if not believed(cell):
            hidden.add(cell["key"])
            cell.update({k: None for k in ("head_median", "head_gmean", *CHANGE)})
            cell["believed"] = False
            continue
        cell["believed"] = True
        ratio = cell["head_gmean"] / cell["base_gmean"] if cell.get("head_gmean") and \
            cell.get("base_gmean") else None
        for side in ("median", "gmean"):
            base = cell.get(f"base_{side}")
            cell[f"head_{side}"] = sig3(base * ratio) if base is not None and ratio else None
    for witness in witnesses:
        for key, entry in (witness.get("cells") or {}).items():
            if key in hidden and entry.get("claimed_s") is not None:
                entry["claimed_s"] = round(float(entry["claimed_s"]), 2)
