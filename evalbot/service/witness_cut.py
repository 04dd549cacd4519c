"""`evalbot witness-cut`: the stored verdicts that got no tier only because a witness was cut.

A witness, evalbot's own timed run of some cells' work (docs/trust.md), may be stopped for box
time before its first look. Its cells then stay "faster, not confirmed" and the PR gets no tier,
though a longer run might have confirmed them. When a profile's witnesses change (a new tool, a
larger share), a maintainer lists these verdicts and queues their PRs again (`evalbot rerun SHA`,
or `/evalbot rerun` on the PR), first in shadow mode. Listing reads the store only: no box time.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from evalbot.config.errors import ConfigError
from evalbot.config.settings import load_config
from evalbot.report.unconfirmed import groups
from evalbot.store.jobs import Store

# verdicts a longer witness could not turn into a tier: a regression, a broken PR, no result
FINAL = ("REJECT", "infra-error")


def cut_witnesses(verdict: Mapping[str, Any], results: Mapping[str, Any] | None) -> list[str]:
    """The faster-but-unconfirmed cells of a verdict without a tier whose witness was cut for
    box time (before its first look, or never started); [] when the verdict has a tier, or its
    missing tier has another cause."""
    headline = str(verdict.get("headline", ""))
    if verdict.get("tier") or any(headline.endswith(word) for word in FINAL):
        return []
    return [cell for group in groups(verdict, results) if group.why.cut for cell in group.cells]


@click.command("witness-cut")
@click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)
@click.option("--pr", type=int, default=None, help="only this PR")
def witness_cut_cmd(config_file: Path, pr: int | None) -> None:
    """List stored verdicts without a tier only because a witness was cut for box time."""
    config = load_config(config_file)
    if not config.store.is_file():
        raise ConfigError(f"{config.store}: no such store")
    repo = config.github.repo if config.github else None
    rows = Store(config.store).history(repo=repo, pr=pr)
    found = 0
    for row in rows:
        if row["stale"]:
            continue  # main has moved: a rerun measures against the new main anyway
        cells = cut_witnesses(row["verdict"], row["results"])
        if cells:
            found += 1
            click.echo(f"PR #{row['pr']} {row['head_sha'][:12]} {row['headline']}: "
                       f"{', '.join(cells)} (queue again: evalbot rerun {row['head_sha']})")
    click.echo(f"{found} of {len(rows)} verdict(s) got no tier only because a witness was cut")
