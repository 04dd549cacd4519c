"""A witness workload as the job describes it (`runs[].witnesses[]`), validated where the job is
parsed; engine.measure.witness runs it.

The witness protocol (docs/trust.md): the process loads and warms up, prints READY, and only
then gets its input from the harness: the prompt as one line (work the cell times as one batch,
a prefill), then, for a stepped witness, one id per line, each written only after the harness
has read the previous step's output line (STEP), so no decode step can be batched, cached or
computed before its input exists. Only the time from the prompt's write to the last output's
read counts. The contract refuses a witness that credits decode work to ids it had before its
work started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checks import ContractError, one_of
from .checks import field as get

OUTPUT_KINDS = ("ids_line", "json_path", "score_lines", "step_lines")
CLOCKS = ("wall", "cpu", "handoff")
READY = "EVALBOT_READY"  # the line a handoff witness prints when its start-up is done
STEP = "EVALBOT_STEP "  # a stepped witness's output line: the argmax after its latest input,
# optionally followed by that step's runner-up id and the top-1 minus top-2 logit margin
# (`EVALBOT_STEP <id> <runner_up> <margin>`): only main's are ever read (engine.measure.witness)
# A step where main's own top two logits are closer than this counts a head's runner-up id as
# agreeing (docs/trust.md, "Near ties"). bf16 keeps 8 significant bits: two correct kernels'
# logits differ by reduction order and rounding by ~0.005-0.01 (the 1% flip rate the issue
# measured needs noise of about that size on the H200's Qwythos margins,
# tests/data/sparkinfer/score-short-h200-qwythos-synth.log: 2% of steps within 0.005, 7% within
# 0.02). 0.05 is several times that noise: a noise flip above it is rare, and a liar gains no
# more from it than it would from any cheaper near-tie rule (it must compute a step to know).
TIE_MARGIN = 0.05
# Placeholders only a witness argv may use: the harness's fresh prompt as a file of ids separated
# by spaces, as a JSON list, or (an argument that is exactly "{prompt_ids}") one argument per id.
PROMPT_PLACEHOLDERS = ("prompt", "prompt_json", "prompt_ids")


@dataclass(frozen=True)
class WitnessSpec:
    """One witness workload of a speed run (the job contract's `runs[].witnesses[]`)."""

    name: str
    argv: list[str]
    cells: dict[str, int]  # cell key -> tokens of that cell's work in one witness process
    prompt_tokens: int  # ids the harness draws per pair
    output: dict[str, Any]  # how to read the output ids: kind ids_line | json_path | score_lines
    output_tokens: int  # how many ids a complete output has
    pairs: int = 4  # the most pairs: the last look
    # Pairs at which the harness may stop (the last is `pairs`): it stops at the first look where
    # the per-pair saving's lower bound at that look's `stop_t` (set by the bot, which judges
    # every look it allowed at alpha / len(looks)) is above 0; a busy box measures on.
    looks: tuple[int, ...] = ()
    stop_t: tuple[float, ...] = ()
    # ... or where its upper bound at `spoof_t` (the bot's, at the contradiction's level) is
    # below half of what the samples' printed rates claim: the claim is already contradicted
    spoof_t: tuple[float, ...] = ()
    # The calibrated sd of the per-pair saving on the profile's box (seconds) and its degrees of
    # freedom (engine/contract/shared/witness_interval.py); 0: judged on the witness's own sd only
    sd_floor_s: float = 0.0
    floor_df: int = 0
    # The bot's per-look critical values for the sd pooled with that floor (floor_df + n - 1 df)
    # and the F guard above which the witness's own S^2 / sd_floor_s^2 refutes the floor
    pooled_stop_t: tuple[float, ...] = ()
    pooled_spoof_t: tuple[float, ...] = ()
    guard: tuple[float, ...] = ()
    # The degrees of freedom the floor counts for at each look (rule 2: at most the look's pairs
    # less one; empty: floor_df at every look) and the bot's rule that set these values
    # (evalbot/grading/confirmation.py; recorded in the results, so a re-grade judges alike)
    pooled_df: tuple[int, ...] = ()
    rule_version: int = 1
    # The bot's per-look t quantiles of the equivalence bound (own sd, pooled): a cell printed
    # unchanged is believed once that lower bound rules out a slowdown of the regression
    # threshold (engine/contract/shared/witness_interval.py `rules_out`, issue 53); empty: never
    equivalence_t: tuple[float, ...] = ()
    pooled_equivalence_t: tuple[float, ...] = ()
    # The box's stored witness pairs refute its floor (evalbot/report/witness_floors.py): the
    # harness does not run it, and it confirms nothing until the floor is measured again
    floor_stale: bool = False
    # main's seconds for the work of the least of its cells it must time both ways, in one
    # process on the box its floor was measured on (the profile's; 0: not given): with the floor,
    # what sizes its last look (evalbot/grading/witness_sizing.py); the harness does not read it
    work_s: float = 0.0
    id_range: int = 1000  # prompt ids are drawn from [0, id_range): valid in any vocabulary
    min_agreement: float = 0.5  # share of output positions where the PR's ids equal main's
    # wall: process start to exit; cpu: the process tree's CPU time; handoff: from the moment the
    # process, started up, prints READY and the harness writes the prompt to its stdin, to the
    # moment its output line is read (engine.sandbox.proc.Handoff): no model load in the time
    clock: str = "wall"
    timeout_s: float = 300.0
    # A stepped witness (handoff or cpu clock): after the prompt, `steps` ids fed one per line,
    # each after the previous STEP line was read; its output is steps + 1 STEP lines (the argmax
    # after the prompt, then after each fed id). 0: the whole input is the prompt.
    steps: int = 0
    # main's top-1 minus top-2 logit margin below which a head's runner-up id agrees (TIE_MARGIN)
    tie_margin: float = TIE_MARGIN


def parse_witness(d: Any, where: str, cell_keys: set[str]) -> WitnessSpec:
    cells = {str(k): int(v) for k, v in (get(d, where, "cells", dict)).items()}
    unknown = sorted(set(cells) - cell_keys)
    if not cells or unknown or any(v < 1 for v in cells.values()):
        raise ContractError(f"{where}.cells: cell keys of this run with tokens >= 1 (bad: {unknown})")
    output = get(d, where, "output", dict)
    one_of(get(output, f"{where}.output", "kind", str), OUTPUT_KINDS, f"{where}.output.kind")
    looks = _looks(d.get("looks", d.get("pairs", 4)), where)
    spec = WitnessSpec(
        name=get(d, where, "name", str),
        argv=[str(a) for a in get(d, where, "argv", list)],
        cells=cells,
        prompt_tokens=get(d, where, "prompt_tokens", int),
        output=dict(output),
        output_tokens=get(d, where, "output_tokens", int),
        pairs=looks[-1],
        looks=looks,
        stop_t=tuple(float(t) for t in d.get("stop_t") or ()),
        spoof_t=tuple(float(t) for t in d.get("spoof_t") or ()),
        sd_floor_s=get(d, where, "sd_floor_s", float, optional=True) or 0.0,
        floor_df=get(d, where, "floor_df", int, optional=True) or 0,
        pooled_stop_t=tuple(float(t) for t in d.get("pooled_stop_t") or ()),
        pooled_spoof_t=tuple(float(t) for t in d.get("pooled_spoof_t") or ()),
        guard=tuple(float(t) for t in d.get("guard") or ()),
        pooled_df=tuple(int(t) for t in d.get("pooled_df") or ()),
        rule_version=get(d, where, "rule_version", int, optional=True) or 1,
        equivalence_t=tuple(float(t) for t in d.get("equivalence_t") or ()),
        pooled_equivalence_t=tuple(float(t) for t in d.get("pooled_equivalence_t") or ()),
        floor_stale=get(d, where, "floor_stale", bool, optional=True) or False,
        work_s=get(d, where, "work_s", float, optional=True) or 0.0,
        id_range=get(d, where, "id_range", int, optional=True) or 1000,
        min_agreement=float(d.get("min_agreement", 0.5)),
        clock=one_of(d.get("clock", "wall"), CLOCKS, f"{where}.clock"),
        timeout_s=get(d, where, "timeout_s", float, optional=True) or 300.0,
        steps=get(d, where, "steps", int, optional=True) or 0,
        tie_margin=_or(get(d, where, "tie_margin", float, optional=True), TIE_MARGIN),
    )
    if spec.prompt_tokens < 1 or spec.output_tokens < 1 or spec.id_range < 2:
        raise ContractError(f"{where}: prompt_tokens, output_tokens >= 1")
    if spec.clock != "wall" and any("{prompt" in a for a in spec.argv):
        # the prompt arrives on stdin after READY; in argv it would be known before the clock
        raise ContractError(f"{where}.argv: a {spec.clock} witness takes its prompt on stdin, "
                            "not from a {prompt...} placeholder")
    _check_steps(spec, where)
    if not 0 <= spec.tie_margin <= 1:  # NaN fails it too; 1 logit is no longer a tie
        raise ContractError(f"{where}.tie_margin: {spec.tie_margin} is not a logit margin "
                            "between 0 and 1")
    for name in ("stop_t", "spoof_t", "pooled_stop_t", "pooled_spoof_t", "guard", "pooled_df",
                 "equivalence_t", "pooled_equivalence_t"):
        if getattr(spec, name) and len(getattr(spec, name)) != len(looks):
            raise ContractError(f"{where}.{name}: one critical value per look {list(looks)}")
    _check_floor(spec, where)
    return spec


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _check_steps(spec: WitnessSpec, where: str) -> None:
    """Decode work is credited only to ids the process could not have had before its work: ids
    fed one per step, or ids it generated itself after a prompt no longer than the cell's
    context (a free-running greedy decode). A prompt longer than that carries forced decode ids
    all at once, and those steps could be batched into one pass."""
    if spec.steps < 0:
        raise ContractError(f"{where}.steps: {spec.steps} steps")
    stepped = spec.steps > 0
    if stepped != (spec.output.get("kind") == "step_lines"):
        raise ContractError(f"{where}: a stepped witness (steps > 0) and output kind "
                            "step_lines go together")
    if stepped and spec.clock == "wall":
        raise ContractError(f"{where}.clock: a stepped witness is fed after READY: handoff or cpu")
    if spec.clock == "cpu" and not stepped:
        raise ContractError(f"{where}.clock: the cpu clock times a stepped witness only")
    if stepped and spec.output_tokens != spec.steps + 1:
        raise ContractError(f"{where}.output_tokens: a stepped witness prints steps + 1 = "
                            f"{spec.steps + 1} ids, not {spec.output_tokens}")
    for key, tokens in spec.cells.items():
        metric, _, ctx = key.rpartition("/")[2].partition("@")
        if metric == "decode":
            free = not stepped and spec.prompt_tokens <= int(ctx or 0)
            most = spec.steps if stepped else spec.output_tokens if free else 0
            if tokens > most:
                raise ContractError(
                    f"{where}.cells: {key} credits {tokens} decode tokens, but only {most} "
                    "reach the process one step at a time (feed decode ids with `steps`; a "
                    "prompt longer than the cell's context is read before the work starts)")
        elif tokens > spec.prompt_tokens:
            raise ContractError(f"{where}.cells: {key} credits {tokens} prefill tokens of a "
                                f"{spec.prompt_tokens}-id prompt")


def _check_floor(spec: WitnessSpec, where: str) -> None:
    """A floor is a measurement: an sd with its degrees of freedom, or neither."""
    if not 0 <= spec.sd_floor_s < spec.timeout_s:  # NaN fails it too
        raise ContractError(f"{where}.sd_floor_s: {spec.sd_floor_s} is not an sd in seconds "
                            f"between 0 and the timeout")
    if not 0 <= spec.work_s < spec.timeout_s:
        raise ContractError(f"{where}.work_s: {spec.work_s} is not main's seconds for a cell's "
                            f"work between 0 and the timeout")
    if spec.floor_df < 0:
        raise ContractError(f"{where}.floor_df: {spec.floor_df} degrees of freedom")
    if (spec.sd_floor_s > 0) != (spec.floor_df > 0):
        raise ContractError(f"{where}.floor_df: sd_floor_s {spec.sd_floor_s} and floor_df "
                            f"{spec.floor_df} go together (both > 0, or both 0)")
    if spec.pooled_stop_t and not spec.guard:
        raise ContractError(f"{where}.guard: pooled critical values need their guard per look")
    if any(not 0 < df <= spec.floor_df for df in spec.pooled_df):
        raise ContractError(f"{where}.pooled_df: {list(spec.pooled_df)}: each look's degrees of "
                            f"freedom between 1 and floor_df {spec.floor_df}")


def _looks(value: Any, where: str) -> tuple[int, ...]:
    """`pairs: 4` (one look) or `pairs: [4, 8]` (looks): increasing, the first >= 3."""
    looks = [value] if isinstance(value, int) and not isinstance(value, bool) else value
    if (not isinstance(looks, list) or not looks
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in looks)
            or looks[0] < 3 or any(b <= a for a, b in zip(looks, looks[1:], strict=False))):
        raise ContractError(f"{where}.pairs: a number >= 3 or increasing looks, the first >= 3 "
                            f"(got {value!r})")
    return tuple(looks)
