"""bench/hidden_cost.py's heads (issue 53: a cell really slowed, printed main-like) and the
profiles it runs them on: a shipped name, a YAML file (an older version: `git show
REV:evalbot/profiles/NAME.yaml`), or sparkinfer with its ungraded cells witnessed
(bench/_witness_ungraded.py)."""

from __future__ import annotations

from bench import _simbox, _witness_ungraded
from bench._simbox import POLICY, Head, World
from evalbot.evaluation.profile import Profile, ProfileRun, load_profile

# an offset head's other cells print this share of the threshold slower than they run: a printed
# slowdown the rule calls unchanged (the honest -1% head's), whose time over-accounts for the
# wall clock what the hidden slowdown leaves unaccounted for
OFFSET = 0.5


def load(name: str) -> Profile:
    """The profile of a shipped name, a YAML file or _witness_ungraded.NAME."""
    return _witness_ungraded.profile() if name == _witness_ungraded.NAME else load_profile(name)


def world(name: str, box: str = "") -> World:
    """The simulated box of the profile `name` (load): the fixtures of its name."""
    if name == _witness_ungraded.NAME:
        return _witness_ungraded.WitnessedWorld("sparkinfer", box=box)
    return World(load_profile(name).name, box=box)


def slowdowns(profile: Profile) -> dict[str, float]:
    """2x, the smallest tier step (the policy's, or the profile's own tier gate where it sets
    one: the demo's 30%) and the regression threshold (the profile's tolerance, else the
    policy's); a step equal to the threshold is one row."""
    tiers = sorted(POLICY.tiers.values())
    step = min([tiers[0]] + [b - a for a, b in zip(tiers, tiers[1:], strict=False)])
    step = profile.speed.significance or step
    t = profile.speed.tolerance or POLICY.tolerance
    out = {"2x": 2.0, f"threshold {100 * t:g}%": 1 / (1 - t)}
    if abs(step - t) > 1e-9:
        out = {"2x": 2.0, f"tier step {100 * step:g}%": 1 + step, **out}
    return out


def heads(profile: Profile, every_cell: bool = False) -> list[Head]:
    """The hiding heads on the first run's smallest and largest cell (by main's work) and a mix on
    all of its cells; with `every_cell`, on every cell of every run (a tier step only on a cell
    a witness times: no other earns a tier), a mix per run of two cells or more, and an offset
    on each cell no witness times. Then the A/A and the honest heads, +5% and -1% every cell."""
    out = []
    t = profile.speed.tolerance or POLICY.tolerance
    for label, s in slowdowns(profile).items():
        for i, run in enumerate(profile.runs if every_cell else profile.runs[:1]):
            out += _hiding(profile, run, label, s, every_cell, i)
            out += _offsets(run, label, s, t) if every_cell else []
    keys = [f"{r.model}/{c.metric}@{c.ctx}" for r in profile.runs for c in r.cells]
    out.append(Head("A/A", honest=False))
    out.append(Head("honest +5% every cell", real={k: 1.05 for k in keys}))
    # slower within the tolerance, printed honestly: "unchanged" (eval:none) is its verdict, which
    # its witnesses must back by ruling out the margin it is nearer to than an A/A
    out.append(Head("honest -1% every cell", real={k: 0.99 for k in keys}))
    return out


def _hiding(profile: Profile, run: ProfileRun, label: str, s: float, every_cell: bool,
            index: int) -> list[Head]:
    """One slowdown's hiding heads on one run (the `index`th): per cell, printed scaled and x0.95,
    then the mix. The first run's cells keep their short names (and so their seeds: the rows of
    docs/statistics.md 9-9c), another run's carry the model."""
    # a profile's run and cells stand for the job's: only their model, metric and ctx are read
    pace = world(profile.name).run(run)  # type: ignore[arg-type]
    work = {f"{run.model}/{c.metric}@{c.ctx}": (c.ctx if c.metric == "prefill" else
                                                 run.decode_tokens) / _simbox.rate(pace, c)  # type: ignore[arg-type]
            for c in run.cells}
    ordered = sorted(work, key=work.__getitem__)
    if every_cell and label.startswith("tier step"):
        ordered = [k for k in ordered if k in _timed(run)]
    out = []
    for key in ordered if every_cell else (ordered[0], ordered[-1]):
        where = key.split("/", 1)[1] if index == 0 else key
        out.append(Head(f"hide {label} on {where}", real={key: 1 / s}, printed={key: s},
                        honest=False))
        out.append(Head(f"hide {label} x0.95 on {where}", real={key: 1 / s},
                        printed={key: 0.95 * s}, honest=False))
    if len(ordered) > 1:
        out.append(Head(f"hide {label} mix" + (f" on {run.model}" if index else ""),
                        real={k: 1 / s for k in ordered},
                        printed={k: s * (1.0 if i % 2 else 0.95) for i, k in enumerate(ordered)},
                        honest=False))
    return out


def _offsets(run: ProfileRun, label: str, s: float, t: float) -> list[Head]:
    """Per cell no witness times (its run's wall clock alone holds it), slowed by `s` and printed
    scaled, while every other cell of its run, at main's true speed, prints OFFSET x t slower:
    the samples' check sums the time over the run's cells, so the over-accounted time hides the
    slowdown's (a mix of printed rates the issue names)."""
    if label.startswith("tier step"):  # no tier for such a cell to hinge on
        return []
    keys = [f"{run.model}/{c.metric}@{c.ctx}" for c in run.cells]
    return [Head(f"hide {label} offset on {key}", real={key: 1 / s},
                 printed={k: s if k == key else 1 - OFFSET * t for k in keys}, honest=False)
            for key in keys if key not in _timed(run) and len(keys) > 1]


def _timed(run: ProfileRun) -> set[str]:
    return {k for w in run.witnesses for k in w.cells}
