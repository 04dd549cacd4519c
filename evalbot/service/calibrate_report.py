"""What `evalbot calibrate` says while it measures and after: a line per step of the A/A run
(a calibration takes minutes, a GPU box's tens of them), and a warning for every cell whose
measured noise leaves the policy's thresholds undecidable on that box.

Undecidable: at the profile's last look (its most pairs) a cell is called neutral only when its
equivalence half-width e = u f / sqrt(n) (u: the rule's quantile for the calibrated floor f) fits
inside the policy's significance and tolerance, ln(1 + s) and -ln(1 - t). A floor that makes e
wider leaves every unchanged PR inconclusive on that cell, and only changes beyond
exp(c f / sqrt(n)) - 1 (c: the directional quantile) get a verdict at all; the floor is stored
all the same (it is the box's truth), and the warning says which cell and what to do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalbot.config.settings import BoxConfig
from evalbot.evaluation.jobspec import WITNESS_FLOOR, make_job
from evalbot.evaluation.profile import Profile
from evalbot.grading.policy import Policy

STEPS = {"build-base": "building main", "build-head": "building main again (head = base)",
         "speed": "measuring", "score": "scoring correctness", "done": "done"}


def progress_lines(echo: Callable[[str], object], pairs: int,
                   clock: Callable[[], float] = time.monotonic) -> Callable[[dict[str, Any]], None]:
    """A pipeline.evaluate(progress=...) callback printing one line each time the A/A run's
    step, run or pair count changes (lines, not a bar: they read the same in a CI log)."""
    started, last = clock(), [""]

    def update(status: dict[str, Any]) -> None:
        step = str(status.get("step", ""))
        line = STEPS.get(step, step)
        if step == "speed" and status.get("pairs") is not None:
            line = f"measuring {status.get('model', '')}: {int(status['pairs'])}/{pairs} pairs"
        if line and line != last[0]:
            last[0] = line
            echo(f"calibrate: {line} ({clock() - started:.0f} s)")
    return update


@dataclass(frozen=True)
class Undecidable:
    cell: str
    floor: float  # the calibrated sd of ln(head/base) per pair
    pairs: int  # the profile's last look
    undecided: float  # the equivalence half-width at that look, as a relative change
    decided: float  # the smallest change called improved or regressed there

    def warning(self, policy: Policy) -> str:
        return (f"warning: {self.cell}: noise {100 * self.floor:.1f}% per pair leaves "
                f"{policy.ident}'s thresholds undecidable: at the profile's last look "
                f"({self.pairs} pairs) a change within ±{100 * self.undecided:.1f}% stays "
                f"undecided, wider than its significance (+{100 * policy.significance:.1f}%) "
                f"and tolerance (-{100 * policy.tolerance:.1f}%), so no PR comes out neutral "
                f"on this cell and only changes beyond ±{100 * self.decided:.1f}% get a "
                "verdict. Quiet the box (no other load, fixed clocks: docs/operations.md, "
                "section 6) and calibrate again, with more pairs (--pairs) if the floor "
                "scatters; or give the profile more pairs per look (speed.looks).")


def undecidable(noise: dict[str, tuple[float, int]], profile: Profile, policy: Policy,
                box: BoxConfig, sha: str) -> list[Undecidable]:
    """The cells whose calibrated floor leaves the policy's thresholds undecidable in a job of
    the profile on this box (the rule a job would get from these floors)."""
    floors = {k: sd for k, (sd, _n) in noise.items() if not k.startswith(WITNESS_FLOOR)}
    if not floors:
        return []
    degrees = min(n for k, (_sd, n) in noise.items() if k in floors) - 1
    # The rule's quantiles depend on the degrees of freedom, not on the floors' values: a floor
    # of 100% or more, which a job refuses (jobspec._floors), still gets its warning here.
    usable = {k: min(sd, 0.5) for k, sd in floors.items()}
    rule = make_job(profile, policy, box, sha, sha, sd_floors=usable, floor_df=degrees).rule
    n = rule.looks[-1]
    inside = min(math.log1p(policy.significance), -math.log1p(-policy.tolerance))
    out = []
    for cell, sd in sorted(floors.items()):
        e = abs(rule.equivalence_floor[-1]) * sd / math.sqrt(n)
        if e >= inside:
            h = abs(rule.critical_floor[-1]) * sd / math.sqrt(n)
            out.append(Undecidable(cell, sd, n, math.expm1(e), math.expm1(h)))
    return out
