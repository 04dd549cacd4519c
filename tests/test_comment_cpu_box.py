"""A comment says nothing of GPU throttling where no GPU measured: the demo's CPU box has no
throttling to drop pairs for (issue 48); a GPU box's comment keeps both sentences."""

from __future__ import annotations

import copy

from evalbot.report.render import render_comment
from tests.comment_fixtures import demo_results, demo_verdict

GPU_STATE = {"name": "NVIDIA H200", "driver_version": "570.86", "clocks.sm": 1980,
             "clocks.mem": 3201, "temperature.gpu": 41, "power.draw": 120.5,
             "clocks_throttle_reasons.active": "0x0"}


def test_a_cpu_box_comment_mentions_no_throttling() -> None:
    verdict = demo_verdict("faster")
    assert not verdict["provenance"]["box"].get("gpu_start")  # the demo runs on a CPU
    text = render_comment(verdict, results=demo_results("faster"))
    assert "no GPU reported" in text
    assert "throttl" not in text
    assert "alternating pairs (main, PR, PR, main, …) on the same box in the same job." in text


def test_a_gpu_box_comment_says_how_throttled_pairs_are_handled() -> None:
    verdict = copy.deepcopy(demo_verdict("faster"))
    verdict["provenance"]["box"].update(gpu_start=GPU_STATE, gpu_end=GPU_STATE)
    text = render_comment(verdict, results=demo_results("faster"))
    assert "pairs measured while the GPU throttled are dropped on both sides." in text
    assert "- pairs dropped for throttling: none" in text
    assert "NVIDIA H200 (driver 570.86)" in text
    results = copy.deepcopy(demo_results("faster"))
    results["box"].update(gpu_start=GPU_STATE, gpu_end=GPU_STATE)
    assert "(~ marks a dropped, throttled pair)" in render_comment(verdict, results=results)
