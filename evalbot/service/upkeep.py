"""`evalbot housekeep`: run engine.harness.housekeeping on each configured box through the Box interface.

The housekeeping code travels like the harness: our own installed copy of engine/ is put under
<workdir>/tools/harness, its tree hash is checked on the box, and it runs with the box's Python
as the harness's user. It never touches what a running job uses (engine/harness/housekeeping.py).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import click

from evalbot.config.errors import PipelineError
from evalbot.config.settings import BoxConfig, load_config
from evalbot.engine.contract.integrity import tree_sha256
from evalbot.evaluation.pipeline import HARNESS_SRC
from evalbot.remote.box import Box, BoxError


def tools_dir(box_config: BoxConfig) -> PurePosixPath:
    return PurePosixPath(box_config.workdir) / "tools" / "harness"


def install_tools(box: Box, box_config: BoxConfig) -> PurePosixPath:
    """A fresh, hash-checked copy of our engine/ on the box; returns its parent directory."""
    root = tools_dir(box_config)
    box.run(["rm", "-rf", "--", str(root)], timeout_s=120)
    box.put(HARNESS_SRC, str(root / "engine"))
    got = box.run([box_config.python, "-m", "engine.contract.integrity", "engine"], cwd=str(root),
                  timeout_s=120)  # relative to cwd: a relative workdir works too
    if got.returncode != 0 or got.output.strip() != tree_sha256(HARNESS_SRC):
        raise PipelineError(f"box {box_config.name}: the housekeeping code copied to the box "
                            "does not match ours; not running it")
    return root


def housekeep_box(box: Box, box_config: BoxConfig, args: list[str]) -> dict[str, Any]:
    """engine.harness.housekeeping's JSON report for one box; `args` are its retention options."""
    root = install_tools(box, box_config)
    argv = ["env", f"PYTHONPATH={root}", box_config.python, "-m", "engine.harness.housekeeping",
            "--workdir", box_config.workdir, "--json", *args]
    box.run(["mkdir", "-p", box_config.workdir], timeout_s=60)
    got = box.run(argv, timeout_s=3600)
    lines = got.output.strip().splitlines()
    try:
        report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        report = {}
    if not report:
        raise PipelineError(f"box {box_config.name}: housekeeping failed (exit {got.returncode}):"
                            f" {lines[-1][-200:] if lines else 'no output'}")
    return report


@click.command("housekeep")
@click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)
@click.option("--box", "box_name", default=None, help="one box (default: every box)")
@click.option("--jobs-days", type=float, default=14.0, show_default=True)
@click.option("--builds-days", type=float, default=30.0, show_default=True)
@click.option("--reference-days", type=float, default=90.0, show_default=True)
@click.option("--budget-gb", type=float, default=None, help="disk budget per box, all caches")
@click.option("--dry-run", is_flag=True, help="report what would go, remove nothing")
def housekeep(config_file: Path, box_name: str | None, jobs_days: float, builds_days: float,
              reference_days: float, budget_gb: float | None, dry_run: bool) -> None:
    """Evict old job directories, builds and reference caches on the boxes."""
    from evalbot.service.pool import open_box

    config = load_config(config_file)
    boxes = [b for b in config.boxes if box_name in (None, b.name)]
    if not boxes:
        raise PipelineError(f"{config_file}: no box named {box_name!r}")
    args = ["--jobs-days", str(jobs_days), "--builds-days", str(builds_days),
            "--reference-days", str(reference_days)]
    args += ["--budget-gb", str(budget_gb)] if budget_gb is not None else []
    args += ["--dry-run"] if dry_run else []
    for box_config in boxes:
        try:
            box = open_box(box_config)
            report = housekeep_box(box, box_config, args)
            box.close()
        except BoxError as exc:
            raise PipelineError(f"box {box_config.name}: {exc}") from exc
        verb = "would free" if dry_run else "freed"
        freed = report["bytes_before"] - report["bytes_after"]
        click.echo(f"{box_config.name}: {verb} {freed} bytes in {len(report['evicted'])} "
                   f"entr{'y' if len(report['evicted']) == 1 else 'ies'}; "
                   f"{len(report['in_use'])} kept in use"
                   + (f"; {report['over_budget']} bytes over budget" if report["over_budget"]
                      else ""))
        for line in report["errors"]:
            click.echo(f"{box_config.name}: error: {line}", err=True)
