"""The harness's stopwatch (engine/harness/stopwatch.py) on a clock the test moves: every moment
goes to exactly one stage, the innermost running, so the stages add up to the total."""

from __future__ import annotations

import pytest

from evalbot.engine.contract.results import TIMING_STAGES
from evalbot.engine.harness.stopwatch import Stopwatch


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_inner_stage_pauses_the_outer_one_and_the_rest_is_what_no_stage_took() -> None:
    clock = Clock()
    watch = Stopwatch(clock)
    clock.now += 1  # set-up
    with watch.stage("measuring"):
        clock.now += 2
        with watch.stage("warmups"):
            clock.now += 3
        clock.now += 4
    clock.now += 5  # writing
    timing = watch.timing()
    assert timing["total_s"] == 15
    assert timing["stages"] == {**dict.fromkeys(TIMING_STAGES, 0.0), "measuring": 6.0,
                                "warmups": 3.0, "rest": 6.0}


def test_a_stage_that_raises_is_charged_and_the_watch_runs_on() -> None:
    clock = Clock()
    watch = Stopwatch(clock)
    with pytest.raises(RuntimeError), watch.stage("builds"):
        clock.now += 7
        raise RuntimeError("the build tool vanished")
    clock.now += 1
    with watch.stage("builds"):  # a second build adds to the same stage
        clock.now += 2
    stages = watch.timing()["stages"]
    assert (stages["builds"], stages["rest"]) == (9.0, 1.0)


def test_a_stage_the_results_do_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="'scoring' is not a stage"), Stopwatch().stage("scoring"):
        pass
