"""evalbot-topk's witness at a depth (engine/llamacpp/topk.cpp, issue 53): the shapes of the
llamacpp cells the first witness does not time, driven through the stepped protocol as the
harness drives it (tests/test_topk_stepped.py's driver, the harness's own handoff).

    witness MODEL 1 255          decode@0: a 1-id prompt at position 0, then 255 steps
    witness MODEL 4096 1 4096    prefill@4096: 4096 fixed ids filled before READY, then the timed
                                 4096-id prompt at positions 4096.., then one step

The live tests need a built tool and a GGUF (EVALBOT_TOPK_BIN, EVALBOT_TOPK_MODEL, as
tests/test_topk_stepped.py says); the candidate profile's tests run everywhere.
"""

from __future__ import annotations

import random
import subprocess

import pytest

from evalbot.engine.contract.witness_spec import READY, STEP, WitnessSpec
from evalbot.engine.measure.witness import handoff_of
from evalbot.engine.measure.witness_output import read_output_ids
from tests.test_topk_stepped import BIN, LIVE, MODEL, Transcript, drive, file_mode, witness_argv


def fill_ids(n: int) -> list[int]:
    """topk.cpp's `fill_id`: the throw-away ids a fill puts at positions 0..n-1."""
    return [(i * 7919 + 17) % 1000 for i in range(n)]


def draw(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1000) for _ in range(n)]  # the harness's id_range


def harness_feed(spec: WitnessSpec, ids: list[int]) -> list[str]:
    """The lines the harness writes for `ids` (engine.measure.witness.handoff_of)."""
    handoff = handoff_of(spec, ids)
    assert handoff is not None and handoff.ready == READY.encode()
    return [handoff.prompt.decode().rstrip("\n")] + [s.decode().rstrip("\n") for s in handoff.steps]


def run_spec(spec: WitnessSpec, ids: list[int]) -> Transcript:
    argv = [a.replace("{build}/evalbot-out/evalbot-topk", BIN).replace("{model}", MODEL)
            for a in spec.argv]
    return drive(argv, harness_feed(spec, ids), timeout_s=300)


def assert_protocol(t: Transcript, spec: WitnessSpec) -> list[int]:
    """READY, then one STEP line answering each line written; exit 0; the ids the harness reads."""
    assert t.returncode == 0 and "[FAIL]" not in t.stderr, t.stderr
    assert t.lines[0] == ("<", READY)
    assert "".join(way for way, _ in t.lines[1:]) == "><" * (spec.steps + 1)
    assert all(text.startswith(STEP) for text in t.printed()[1:])
    ids = read_output_ids("\n".join(t.printed()) + "\n", spec.output)
    assert ids == t.step_ids() and len(ids) == spec.output_tokens
    return ids


def candidate_witness(name: str) -> WitnessSpec:
    from tests.test_gpu_candidate_profile import candidate_profile

    [spec] = [w for r in candidate_profile().runs for w in r.witnesses if w.name == name]
    return spec


@LIVE
def test_live_decode_at_0_is_256_single_steps_from_an_empty_cache() -> None:
    """The candidate's decode-0 witness as the harness runs it: 256 STEP lines, and the 255
    argmaxes after the fed ids are the file mode's over the same ids from position 0."""
    spec = candidate_witness("decode-0")
    ids = draw(spec.prompt_tokens + spec.steps, 53)
    out = assert_protocol(run_spec(spec, ids), spec)
    assert out[1:] == file_mode(BIN, MODEL, 1, ids)
    assert len(set(out)) > 1  # random weights, random ids: one id throughout decoded nothing


@LIVE
def test_live_prefill_at_4096_runs_its_prompt_on_top_of_the_fill() -> None:
    """The candidate's prefill witness: READY, the 4096-id prompt, one step, two STEP lines;
    the step's argmax is the file mode's over the fill's 4096 ids, the prompt and the step
    (positions 8192 of one sequence), and not the one without the fill."""
    spec = candidate_witness("prefill-4096-at-4096")
    n_fill = int(spec.argv[-1])
    ids = draw(spec.prompt_tokens + spec.steps, 54)
    deep = run_spec(spec, ids)
    out = assert_protocol(deep, spec)
    assert out[1:] == file_mode(BIN, MODEL, n_fill + spec.prompt_tokens, fill_ids(n_fill) + ids)
    # the fill moved the prompt: the STEP lines' margins differ from the prompt at position 0
    # (a 1-layer random model's argmax after 4096 ids hardly depends on the ids before them)
    shallow = drive(witness_argv(BIN, MODEL, spec.prompt_tokens, spec.steps), harness_feed(spec, ids))
    assert shallow.returncode == 0 and shallow.printed()[1:] != deep.printed()[1:]


@LIVE
@pytest.mark.parametrize("n_prefill, n_steps, n_fill", [(8, 24, 40), (1, 16, 7), (16, 4, 600)])
def test_live_a_fill_puts_the_prompt_at_its_depth(n_prefill: int, n_steps: int, n_fill: int) -> None:
    """Small shapes, a fill longer than one batch among them: every step's argmax equals the file
    mode's with the fill's ids in front (the same cache, the same positions)."""
    ids = draw(n_prefill + n_steps, n_fill)
    feed = [" ".join(map(str, ids[:n_prefill]))] + [str(i) for i in ids[n_prefill:]]
    t = drive([*witness_argv(BIN, MODEL, n_prefill, n_steps), str(n_fill)], feed)
    assert t.returncode == 0 and t.lines[0] == ("<", READY), t.stderr
    out = t.step_ids()
    assert len(out) == n_steps + 1
    assert out[1:] == file_mode(BIN, MODEL, n_fill + n_prefill, fill_ids(n_fill) + ids)
    assert out[1:] != file_mode(BIN, MODEL, n_prefill, ids)  # not the prompt at position 0


@LIVE
def test_live_no_fill_is_the_three_argument_form() -> None:
    ids = draw(8 + 12, 7)
    feed = [" ".join(map(str, ids[:8]))] + [str(i) for i in ids[8:]]
    three = drive(witness_argv(BIN, MODEL, 8, 12), feed)
    four = drive([*witness_argv(BIN, MODEL, 8, 12), "0"], feed)
    assert three.returncode == four.returncode == 0
    assert three.lines == four.lines


@LIVE
def test_live_a_bad_fill_fails_clearly() -> None:
    done = subprocess.run([BIN, "witness", MODEL, "8", "3", "-1"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "[FAIL] N_FILL >= 0" in done.stderr
    done = subprocess.run([BIN, "witness", MODEL, "8", "3", "4", "5"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 64 and "witness MODEL N_PREFILL N_STEPS [N_FILL]" in done.stderr
