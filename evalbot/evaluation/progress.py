"""Progress for the CLI: a rich bar per evaluation fed by the harness's status.json."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

STEPS = {"build-base": 1, "build-head": 2, "speed": 3, "score": 8, "done": 10}


@contextmanager
def evaluation_bar(console: Console, title: str) -> Iterator[Any]:
    """Yields a callback for pipeline.evaluate(progress=...)."""
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[step]}"),
                  TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task(title, total=10, step="preparing")

        def update(status: dict[str, Any]) -> None:
            step = str(status.get("step", ""))
            done = STEPS.get(step, 0)
            label = step
            if step == "speed" and status.get("pairs"):
                pairs, most = int(status["pairs"]), int(status.get("max_pairs", 1))
                done = 3 + round(5 * pairs / max(most, 1))
                label = f"speed: {pairs}/{most} pairs"
            bar.update(task, completed=done, step=label)

        yield update
