"""Which cells' figures the bot believes (issue 31): none the harness's clock did not back.

A rate the PR's bench tool prints is the PR's own text. For a cell the harness's clock did not
back (`unconfirmed`, `spoofed`: a witness that contradicted or did not confirm it) the bot
believes neither the PR's figures nor the change computed from them. Grading marks each cell;
what a verdict then publishes of any cell is evalbot/report/publication.py's rule (issue 45).
"""

from __future__ import annotations

from typing import Any

NOT_BELIEVED = ("spoofed", "unconfirmed")


def believed(cell: dict[str, Any]) -> bool:
    """A faster cell the witness did not back was made `unconfirmed` or `spoofed` by then
    (confirmation.confirm); a cell that claims no gain needs no witness."""
    return cell["decision"] not in NOT_BELIEVED


def mark(cells: list[dict[str, Any]]) -> None:
    """In place, once the cells are decided and tiered: whether the bot believes each."""
    for cell in cells:
        cell["believed"] = believed(cell)
