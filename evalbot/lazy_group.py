"""A click group whose commands are imported only when one runs.

`evalbot --help` and `evalbot --version` must not pay for numpy, scipy, matplotlib, paramiko or
PyGithub. Click's documented pattern for this (Group.get_command importing on demand) still
imports every command to print its one-line help, so each lazy command's summary is kept here;
tests/test_cli.py checks that each equals the command's own docstring summary.

A command whose module needs an extra that is not installed (`dashboard`: matplotlib) raises
EvalbotError on import, naming the extra; its `--help` still works, and says so.
"""

from __future__ import annotations

import importlib

import click

from evalbot.config.errors import EvalbotError


class LazyGroup(click.Group):
    def __init__(self, *args: object, lazy: dict[str, tuple[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = lazy  # name -> ("module:attribute", one-line help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = self.lazy[cmd_name][0].split(":")
        try:
            module = importlib.import_module(module_name)
        except EvalbotError as exc:  # an extra this install lacks
            return _unavailable(cmd_name, self.lazy[cmd_name][1], str(exc))
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                command = self.commands[name]
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
            else:
                rows.append((name, self.lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _unavailable(name: str, summary: str, why: str) -> click.Command:
    """A stand-in whose help is the command's summary and why it cannot run here (unwrapped:
    `\\b`, so the install command stays on one line); run, it fails with that reason (exit 1,
    one line)."""

    def refuse(**_: object) -> None:
        raise EvalbotError(why)

    return click.Command(name, callback=refuse, help=f"{summary}\n\n\b\nNot available here: {why}",
                         context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})
