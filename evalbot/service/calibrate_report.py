"""What `evalbot calibrate` says while it measures and after: a line per step of the A/A run
(a calibration takes minutes, a GPU box's tens of them), and a warning for every cell whose
measured noise leaves the policy's thresholds undecidable on that box.

Undecidable: at the profile's last look (its most pairs) a cell is called neutral only when its
equivalence half-width e = u f / sqrt(n) (u: the rule's quantile for the calibrated floor f) fits
inside the policy's significance and tolerance, ln(1 + s) and -ln(1 - t). A floor that makes e
wider leaves every unchanged PR inconclusive on that cell, and only changes beyond
exp(c f / sqrt(n)) - 1 (c: the directional quantile) get a verdict at all; the floor is stored
all the same (it is the box's truth), and the warning says which cell and what to do.

Unruled (a witness's margin undecidable): where the profile's witnesses time every covered cell
(`speed.witness_every_cell`), a cell printed unchanged is believed only where a witness rules out
a slowdown of the witness margin of the cell's work at or before its last look. The job a PR on
this box gets (make_job with the box's stored floors, as the worker builds it) fixes each
witness's floor, last look (witness_sizing's, capped at MAX_LAST_LOOK) and room; witness_sizing's
`miss` at that look, with the cell's work as main's printed rates in the A/A give it (what the
grader rules out), is the chance an honest unchanged PR leaves the cell not believed. A cell
whose chance (every witness of it missing) is above the per-PR target the sizing aims for
(FALSE_FLAGS_PER_PR) is warned of, with the pairs its witness would need; and, once, the chance
that an honest unchanged PR has any cell not believed. Warnings only: the floors are stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job
from evalbot.engine.contract.shared import replay
from evalbot.engine.contract.shared.witness_interval import Floor, claimed_saving
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.evaluation.jobspec import CALIBRATION_DF, WITNESS_FLOOR, make_job
from evalbot.evaluation.profile import Profile
from evalbot.grading import witness_sizing
from evalbot.grading.confirmation import BOTH_WAYS_RULE
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


NEEDED_UP_TO = 4096  # the pairs a witness would need are searched up to this many


@dataclass(frozen=True)
class Unruled:
    witness: str
    cells: tuple[str, ...]  # every cell the witness rules in
    cell: str  # the one an honest unchanged PR leaves not believed too often
    floor_s: float  # the witness's floor in a job on this box (sd of a pair's saving)
    profile_floor_s: float  # the profile's own
    pairs: int  # its last look in a job on this box
    sized: bool  # that look was sized from the floor and `work_s` (witness_sizing)
    margin: float  # the witness margin, a share of the cell's work
    work_s: float  # main's seconds for the cell's work in one witness process
    miss: float  # the chance the cell is not believed: each of its witnesses misses
    needed: int | None  # the last look the target would need (None: over NEEDED_UP_TO)
    calibrated: bool  # the floor is the box's own (calibrate --witnesses), not the profile's

    def warning(self) -> str:
        return (f"warning: witness {self.witness} (rules in {', '.join(self.cells)}): "
                f"{self._floor()} leaves its witness margin undecidable on this box: at its last "
                f"look ({self._look()}) an honest unchanged PR fails to rule out a "
                f"{100 * self.margin:g}% slowdown of {self.cell} ({self.margin * self.work_s:.4f} "
                f"s of main's {self.work_s:.3f} s) with a chance of {self.miss:.2g}, above the "
                f"{100 * witness_sizing.FALSE_FLAGS_PER_PR:g}% a PR the sizing aims for: "
                f"{in_words(self.miss)} honest unchanged PRs on this box will be inconclusive "
                f"for {self.cell} (not believed: slowdown not ruled out); the witness would need "
                f"{self._need()}.")

    def _floor(self) -> str:
        if not self.calibrated:
            return f"the profile's floor, {self.floor_s:.4f} s per pair (not calibrated here),"
        return (f"noise {self.floor_s:.4f} s per pair, {self.floor_s / self.profile_floor_s:.1f} "
                f"times the profile's floor ({self.profile_floor_s:.4f} s),")

    def _look(self) -> str:
        cap = witness_sizing.MAX_LAST_LOOK
        if not self.sized:
            return f"{self.pairs} pairs: no work_s, so not sized"
        return f"{self.pairs} pairs, sized " + (f"to the cap of {cap}" if self.pairs >= cap
                                                 else "from its floor")

    def _need(self) -> str:
        cap = witness_sizing.MAX_LAST_LOOK
        if self.needed is None:
            return f"more than {NEEDED_UP_TO} pairs"
        return f"about {self.needed} pairs" + (f" (sized past the cap of {cap})"
                                               if self.needed > cap else "")


QUIETER = ("Quiet the box (no other load, the CPU's frequency pinned, the witnesses' cores "
           "isolated: docs/setup.md, section 6) and calibrate again with --witnesses; or accept "
           "that unchanged PRs on it come out eval:inconclusive.")


def in_words(chance: float) -> str:
    """'about N in 100' (or in 1,000 below 1%)."""
    if chance >= 0.01:
        return f"about {round(100 * chance)} in 100"
    return f"about {max(round(1000 * chance), 1)} in 1,000"


@dataclass(frozen=True)
class WitnessMargins:
    unruled: list[Unruled]
    any_miss: float  # the chance an honest unchanged PR has some cell not believed
    chances: dict[str, float]  # each judged cell's: every witness of it misses

    def lines(self) -> list[str]:
        """A warning per unruled cell's witness, then, once, the PR's chance where above the
        target and what to do."""
        out = [u.warning() for u in self.unruled]
        if self.any_miss > witness_sizing.FALSE_FLAGS_PER_PR:
            out.append(f"warning: an honest unchanged PR on this box leaves some cell not "
                       f"believed (its witness misses its margin at its last look) with a chance "
                       f"of {self.any_miss:.2g}, above the "
                       f"{100 * witness_sizing.FALSE_FLAGS_PER_PR:g}% a PR the sizing aims for: "
                       f"{in_words(self.any_miss)} such PRs will be eval:inconclusive. {QUIETER}")
        return out


def unruled(floors: dict[str, float], degrees: int, results: dict[str, Any] | None,
            profile: Profile, policy: Policy, box: BoxConfig, sha: str) -> WitnessMargins:
    """The cells an honest unchanged PR on this box leaves not believed with a chance above
    FALSE_FLAGS_PER_PR, in the job a PR gets from the box's stored `floors` (NoiseStore.floors,
    `degrees`: NoiseStore.degrees), the cell's work by main's printed rates in the A/A `results`
    (else the witness's `work_s`). The room (its share grown with the sized looks) is taken to
    let every witness reach its last look: whether it does is the box's walls' question."""
    df = degrees or CALIBRATION_DF
    job = make_job(profile, policy, box, sha, sha, sd_floors=floors, floor_df=df, witness_df=df)
    margin = job.rule.witness_margin
    if not (job.rule.witness_every_cell and margin > 0):
        return WitnessMargins([], 0.0, {})
    misses = _misses(job, results)
    by_cell: dict[str, float] = {}
    for _spec, cell, _work, p in misses:
        by_cell[cell] = by_cell.get(cell, 1.0) * p  # not believed: every witness of it missed
    checks = sum(len(w.cells) for r in job.runs for w in r.witnesses)
    shipped = {w.name: w for r in profile.runs for w in r.witnesses}
    found = [Unruled(spec.name, tuple(spec.cells), cell, spec.sd_floor_s,
                     shipped[spec.name].sd_floor_s, spec.looks[-1],
                     spec.rule_version >= BOTH_WAYS_RULE and spec.work_s > 0, margin, work,
                     by_cell[cell], _needed(shipped[spec.name], spec, margin * work, checks),
                     WITNESS_FLOOR + spec.name in floors)
             for spec, cell, work, _p in misses
             if by_cell[cell] > witness_sizing.FALSE_FLAGS_PER_PR]
    return WitnessMargins(found, 1.0 - math.prod(1.0 - p for p in by_cell.values()), by_cell)


def _misses(job: Job, results: dict[str, Any] | None
            ) -> list[tuple[WitnessSpec, str, float, float]]:
    """(witness, cell, main's seconds for its work, witness_sizing's miss at the witness's last
    look in `job`) for every cell a witness rules in whose work is known."""
    records = {replay.cell_key(c): c for c in (results or {}).get("cells", [])}
    margin = job.rule.witness_margin
    return [(spec, cell, work, witness_sizing.miss(
        spec.looks[-1], spec.looks, Floor(spec.sd_floor_s, spec.floor_df), margin * work,
        spec.rule_version))
        for r in job.runs for spec in r.witnesses for cell, tokens in spec.cells.items()
        for work in [_work_s(records.get(cell), tokens, spec)] if work > 0]


def _work_s(record: dict[str, Any] | None, tokens: int, spec: WitnessSpec) -> float:
    """main's seconds for the cell's work in one witness process: by its printed rates in the
    A/A, as the grader's bound takes it (confirmation.judge), else the witness's `work_s`."""
    claimed = None if record is None else claimed_saving(
        record["samples"], int(tokens), record.get("higher_is_better", True))
    return claimed[1] if claimed is not None else spec.work_s


def _needed(shipped: WitnessSpec, spec: WitnessSpec, delta_s: float, checks: int) -> int | None:
    """The last look witness_sizing would size for this witness were its cap NEEDED_UP_TO, not
    MAX_LAST_LOOK; None where even that look misses the sizing's target."""
    looks, floor = shipped.looks, Floor(spec.sd_floor_s, spec.floor_df)
    n = witness_sizing.last_look(looks, floor, delta_s, checks, BOTH_WAYS_RULE, cap=NEEDED_UP_TO)
    target = witness_sizing.FALSE_FLAGS_PER_PR / max(checks, 1)
    missed = witness_sizing.miss(n, (*looks, n), floor, delta_s, BOTH_WAYS_RULE) > target
    return None if missed else n
