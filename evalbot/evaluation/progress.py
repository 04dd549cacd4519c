"""Progress for the CLI: a rich bar per evaluation fed by the harness's status.json."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

STEPS = {"build-base": 1, "build-head": 2, "speed": 3, "score": 8, "done": 10}


@contextmanager
def evaluation_bar(console: Console, title: str) -> Iterator[Any]:
    """Yields a callback for pipeline.evaluate(progress=...)."""
    with evaluation_bars(console) as add:
        yield add(title)


@contextmanager
def evaluation_bars(console: Console) -> Iterator[Callable[[str], Any]]:
    """One display of a bar per evaluation, for evaluations side by side (rich draws one live
    display at a time): yields `add(title)`, which adds a bar and returns its callback."""
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[step]}"),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        yield lambda title: _bar_update(bar, bar.add_task(title, total=10, step="preparing"))


def _bar_update(bar: Progress, task: TaskID) -> Callable[[dict[str, Any]], None]:
    def update(status: dict[str, Any]) -> None:
        step = str(status.get("step", ""))
        done = STEPS.get(step, 0)
        label = step
        if step == "speed" and status.get("pairs"):
            pairs, most = int(status["pairs"]), int(status.get("max_pairs", 1))
            done = 3 + round(5 * pairs / max(most, 1))
            label = f"speed: {pairs}/{most} pairs"
        bar.update(task, completed=done, step=label)

    return update
