"""Rates are read from real engine outputs (fixtures); a missing value is an error, never a zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalbot.engine.contract.job import Cell
from evalbot.engine.measure.parsing import ParseError, read_argmax, read_rates

FIXTURES = Path(__file__).parent / "data" / "fixtures"
SPARK_SWEEP = {"kind": "json_line", "prefix": "SWEEP_JSON ",
               "fields": {"decode": "{ctx}.decode_tps", "prefill": "{ctx}.prefill_pp"}}
SPARK_SINGLE = {"kind": "regex", "patterns": {
    "decode": r"^decode tg\s*:\s*([0-9.]+) tok/s", "prefill": r"^prefill pp\s*:\s*([0-9.]+) tok/s"}}


def test_sparkinfer_sweep_line() -> None:
    out = (FIXTURES / "sparkinfer-sweep-h200-synthetic-qwythos9b.log").read_text()
    cells = [Cell("q", "decode", 4096), Cell("q", "prefill", 65536)]
    assert read_rates(out, SPARK_SWEEP, cells) == {"q/decode@4096": 344.3795,
                                                   "q/prefill@65536": 4583.0891}


@pytest.mark.parametrize(("ctx", "decode"), [(128, None), (512, None), (4096, 389.10),
                                             (16384, None)])
def test_sparkinfer_single_context(ctx: int, decode: float | None) -> None:
    out = (FIXTURES / f"sparkinfer-bench-ctx{ctx}_out128.log").read_text()
    rate = read_rates(out, SPARK_SINGLE, [Cell("q", "decode", ctx)])["q/decode@" + str(ctx)]
    assert rate > 0
    if decode is not None:
        assert rate == decode


def test_llama_bench_json_by_depth() -> None:
    out = (FIXTURES / "llama-bench-h200-qwen3-1p7b-synthetic.json").read_text()
    cells = [Cell("l", "prefill", 4096), Cell("l", "decode", 16384)]
    rates = read_rates(out, {"kind": "llama_bench"}, cells)
    assert rates == {"l/prefill@4096": 23402.885095, "l/decode@16384": 417.026105}


def _repeated_first_depth() -> str:
    """llama-bench -d 0,0,4096 as it prints: the depth-0 tests twice, the first copy slow."""
    import json

    entries = json.loads((FIXTURES / "llama-bench-h200-qwen3-1p7b-synthetic.json").read_text())
    slow = [{**e, "avg_ts": e["avg_ts"] * 0.9} for e in entries[:2]]
    return "\n".join(["[", json.dumps(slow + entries[:4])[1:-1], "]"]) + "\n"


def test_llama_bench_throw_away_first_tests_are_not_scored() -> None:
    out = _repeated_first_depth()
    cells = [Cell("l", "prefill", 0), Cell("l", "decode", 0), Cell("l", "decode", 4096)]
    rates = read_rates(out, {"kind": "llama_bench", "discard_first": 2}, cells)
    assert rates == {"l/prefill@0": 25983.204596, "l/decode@0": 575.588476,
                     "l/decode@4096": pytest.approx(521.7, abs=0.1)}
    with pytest.raises(ParseError, match="2 llama-bench entries match"):
        read_rates(out, {"kind": "llama_bench"}, cells)  # the slow copy is never silently taken
    with pytest.raises(ParseError, match="none is left"):
        read_rates(out, {"kind": "llama_bench", "discard_first": 6}, cells)
    with pytest.raises(ParseError, match="discard_first"):
        read_rates(out, {"kind": "llama_bench", "discard_first": -1}, cells)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("nothing here\n", "expected one line starting 'SWEEP_JSON'"),
        ('SWEEP_JSON {"4096": {"decode_tps": 0.0, "prefill_pp": 1}}\n', "not a positive"),
        ('SWEEP_JSON {"512": {"decode_tps": 1, "prefill_pp": 1}}\n', "missing"),
        ("SWEEP_JSON {not json\n", "is not JSON"),
        ('SWEEP_JSON {"4096": {"decode_tps": "NaN", "prefill_pp": 1}}\n', "not a positive"),
        ('SWEEP_JSON {}\nSWEEP_JSON {}\n', "found 2"),
    ],
)
def test_missing_or_bad_values_are_errors(output: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        read_rates(output, SPARK_SWEEP, [Cell("q", "decode", 4096)])


def test_failed_engine_output_is_not_a_rate() -> None:
    out = "[FAIL] load\n"
    with pytest.raises(ParseError):
        read_rates(out, SPARK_SINGLE, [Cell("q", "decode", 4096)])


def test_decode_argmax_is_read_for_decode_cells_only() -> None:
    out = 'B {"64": {"decode_tps": 5, "prefill_tps": 9, "decode_argmax": [1, 2]}}\n'
    parse = {"kind": "json_line", "prefix": "B ", "argmax": "{ctx}.decode_argmax",
             "fields": {"decode": "{ctx}.decode_tps", "prefill": "{ctx}.prefill_tps"}}
    cells = [Cell("m", "decode", 64), Cell("m", "prefill", 64)]
    assert read_argmax(out, parse, cells) == {"m/decode@64": [1, 2]}
