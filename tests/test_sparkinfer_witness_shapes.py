"""Every sparkinfer witness asks evalbot's witness tool for a shape it runs
(engine/sparkinfer/witness.cpp `parse_args`: `prefill MODEL P N` or `decode MODEL D N`, with
--ctxs, --bench-tokens, --warm-prompt (prefill only) and --fill-seed), and credits each cell
the work that shape does: a prefill of P ids to prefill@P, N steps at depth D to decode@D.
Profile version 7 split Qwen3.6's prefill-512-decode-512 witness in two (issue 53): each cell
of that model's 512 context is ruled in by a witness of its own work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalbot.evaluation.profile import load_profile

ROOT = Path(__file__).resolve().parents[1]
TOOL = (ROOT / "engine" / "sparkinfer" / "witness.cpp").read_text()
PROFILE = load_profile("sparkinfer")
WITNESSES = [(run.model, w) for run in PROFILE.runs for w in run.witnesses]
OPTIONS = {"prefill": ("--ctxs=", "--bench-tokens=", "--warm-prompt="),
           "decode": ("--ctxs=", "--bench-tokens=", "--fill-seed=")}


def test_the_tool_parses_the_options_the_profile_uses() -> None:
    for option in {o for opts in OPTIONS.values() for o in opts}:
        assert f'"{option}"' in TOOL, option
    assert re.search(r'a\.mode != "prefill" && a\.mode != "decode"', TOOL)


@pytest.mark.parametrize(("model", "spec"), WITNESSES, ids=[w.name for _, w in WITNESSES])
def test_each_witness_is_a_shape_the_tool_runs_and_credits_its_own_work(model, spec) -> None:
    mode, size, steps = spec.argv[1], int(spec.argv[3]), int(spec.argv[4])
    assert spec.argv[2] == "{model}" and mode in OPTIONS
    assert all(a.startswith(OPTIONS[mode]) for a in spec.argv[5:]), spec.argv[5:]
    assert (spec.steps, spec.output_tokens) == (steps, steps + 1)
    if mode == "prefill":
        assert spec.prompt_tokens == size
        assert spec.cells.get(f"{model}/prefill@{size}") in (None, size)
    else:  # one id at D + 8, then the N steps the cell is credited
        assert spec.prompt_tokens == 1 and spec.cells == {f"{model}/decode@{size}": steps}
    assert spec.work_s > 0, "with witness_every_cell, work_s sizes the last look"


def test_qwen36_s_512_cells_each_have_a_witness_of_their_own() -> None:
    qwen = {w.name: w for model, w in WITNESSES if model == "qwen3.6-35b-a3b"}
    assert "qwen36-prefill-512-decode-512" not in qwen
    assert qwen["qwen36-prefill-512"].cells == {"qwen3.6-35b-a3b/prefill@512": 512}
    assert qwen["qwen36-decode-512"].cells == {"qwen3.6-35b-a3b/decode@512": 512}
    ruled = [key for w in qwen.values() for key in w.cells]
    assert ruled.count("qwen3.6-35b-a3b/prefill@512") == 1
    assert ruled.count("qwen3.6-35b-a3b/decode@512") == 1
