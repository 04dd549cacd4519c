"""The console the commands print their tables to.

On a terminal rich fits a table to the window. Without one (a pipe, a file, CI's log) rich would
assume 80 columns and cut or fold every cell to fit them; a script reading `evalbot status` or
`evalbot eval` then gets broken values. There, lines are as long as their cells.
"""

from __future__ import annotations

from rich.console import Console

UNCUT_WIDTH = 1000  # columns without a terminal: no table of evalbot's comes near it


def output_console(stderr: bool = False, min_width: int = 0) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal:
        return Console(stderr=stderr, width=UNCUT_WIDTH)
    if console.width < min_width:
        return Console(stderr=stderr, width=min_width)
    return console
