"""The design sparkinfer's profile v9 did not take (docs/statistics.md 9d): keep grading the three
cells no wall clock resolves (decode@131072, Qwen3.6's decode@16384 and @32768) and give each a
witness of its own, for bench/hidden_cost.py's box time (`--profiles sparkinfer-witnessed`).

The profile is the shipped one with those cells back (v8's anchors) and three witnesses made as
their neighbours are: decode-131072 as decode-65536 (1024 steps, its floor), qwen36-decode-16384
and -32768 as qwen36-decode-4096 (512 steps, its floor and `work_s`). No process of any of them
was ever timed. Their paces:
- Qwen3.6's: bench/_paces.py `_assumed_qwen36_witness` of their own argv (the 4-layer file's
  token fill and steps scaled to 40 layers, as the other Qwen3.6 witnesses are);
- decode-131072: decode-65536's measured steps at the 131072 sweep's decode rate against the
  64k sweep's, its load decode-128's measured one (the model) plus a 131072-position fill at the
  131072 sweep's prefill rate (4,586 tok/s; one H200 pair, `_paces._sweep_run({131072})`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench import _h100_noise, _paces
from bench._simbox import World
from evalbot.engine.contract.job import SpeedRun
from evalbot.engine.contract.witness_spec import WitnessSpec
from evalbot.evaluation.profile import Profile, ProfileCell, ProfileRun, load_profile

NAME = "sparkinfer-witnessed"  # its name in bench/hidden_cost.py's --profiles
DEEP = 131072
# cell -> (the neighbour's witness it is made from, v8's anchor)
MADE_FROM = {"qwythos-9b/decode@131072": ("decode-65536", 220.6),
             "qwen3.6-35b-a3b/decode@16384": ("qwen36-decode-4096", 280.7),
             "qwen3.6-35b-a3b/decode@32768": ("qwen36-decode-4096", 279.8)}


def profile() -> Profile:
    """The shipped sparkinfer profile with the three cells graded, each on a witness."""
    shipped = load_profile("sparkinfer")
    specs = {w.name: w for run in shipped.runs for w in run.witnesses}
    runs = []
    for run in shipped.runs:
        ctxs = {c.ctx for c in run.cells}  # decode@131072 goes to the run of prefill@131072
        mine = {k: v for k, v in MADE_FROM.items()
                if k.startswith(f"{run.model}/") and int(k.rsplit("@", 1)[1]) in ctxs}
        runs.append(_with(run, mine, specs) if mine else run)
    return replace(shipped, name=NAME, runs=tuple(runs))


def _with(run: ProfileRun, cells: dict[str, tuple[str, float]],
          specs: dict[str, WitnessSpec]) -> ProfileRun:
    extra, added = [], []
    for key, (neighbour, anchor) in cells.items():
        ctx = int(key.rsplit("@", 1)[1])
        base = specs[neighbour]
        name = base.name.rsplit("-", 1)[0] + f"-{ctx}"
        argv = [str(ctx) if i == 3 else a for i, a in enumerate(base.argv)]
        steps = next(iter(base.cells.values()))
        work = base.work_s if ctx != DEEP else steps / _deep().rates[f"decode@{DEEP}"]
        extra.append(replace(base, name=name, argv=argv, cells={key: steps},
                             work_s=round(work, 3), timeout_s=300.0))
        added.append(ProfileCell("decode", ctx, anchor))
    return replace(run, cells=run.cells + tuple(added), witnesses=run.witnesses + tuple(extra))


def _deep() -> _paces.RunPace:
    return _paces.run_pace("sparkinfer", "qwythos-9b", {DEEP})


@dataclass(frozen=True)
class WitnessedWorld(World):
    """The simulated box, with decode-131072's assumed pace (module docstring)."""

    def witness(self, run: SpeedRun, spec: WitnessSpec) -> _paces.WitnessPace:
        if spec.name != f"decode-{DEEP}":
            return super().witness(run, spec)
        rows = _paces._tool_rows(_paces.SPARK_QWYTHOS)
        near = _paces._measured(rows["decode-65536"], "")
        model = _paces._measured(rows["decode-128"], "").load_s
        scale = _paces._sweep_run(_paces.QWYTHOS_SWEEP).rates["decode@65536"] / \
            _deep().rates[f"decode@{DEEP}"]
        load = model + DEEP / _deep().rates[f"prefill@{DEEP}"]
        seconds = near.seconds * scale
        pace = _paces.WitnessPace(seconds, seconds + load, load, near.pair_sd_s * scale,
                                  near.wall_jitter_s, f"{_paces.ASSUMED}: decode-65536 at "
                                  f"{DEEP} (bench/_witness_ungraded.py)")
        return _h100_noise.witness(self.box, pace, spec, self.fixtures)
