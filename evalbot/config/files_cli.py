"""`evalbot files [NAME]`: the files the wheel carries for a maintainer to copy out.

A wheel install has no checkout to copy the example config or the Actions workflows from
(docs/setup.md): they ship inside the package, and this prints them.
"""

from __future__ import annotations

import click

from evalbot.config.errors import EvalbotError
from evalbot.config.resources import packaged

# name -> (path inside the package, what it is for)
SHIPPED = {
    "evalbot.example.yaml": ("evalbot.example.yaml", "the example config: every key, documented"),
    "evalbot.yml": ("workflows/evalbot.yml",
                    "the Actions workflow an engine repository installs (.github/workflows/)"),
    "evalbot-scheduled.yml": ("workflows/evalbot-scheduled.yml",
                              "its scheduled companion: rounds, box housekeeping, the dashboard"),
}


@click.command()
@click.argument("name", required=False)
def files(name: str | None) -> None:
    """List the files shipped for you to copy out (example config, workflows), or print one.

    For example: evalbot files evalbot.yml > .github/workflows/evalbot.yml"""
    if name is None:
        for known, (_, purpose) in SHIPPED.items():
            click.echo(f"{known:<24} {purpose}")
        return
    if name not in SHIPPED:
        raise EvalbotError(f"no shipped file named {name!r}; one of: {', '.join(SHIPPED)}")
    click.echo(packaged(SHIPPED[name][0]).read_text(), nl=False)
