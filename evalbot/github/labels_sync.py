"""labels.yaml is the source of truth: a pure diff against the repository's labels, then apply.

Also knows which labels are evalbot's (to replace stale ones) and how dynamic ones are styled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evalbot.github.port import GitHubPort, LabelInfo
from evalbot.grading.policy import LabelBook


@dataclass(frozen=True)
class Change:
    action: str  # create | update
    label: LabelInfo
    why: str


def desired_labels(book: LabelBook) -> list[LabelInfo]:
    return [LabelInfo(lb.name, _color(lb.color), lb.description) for lb in book.labels]


def diff(desired: list[LabelInfo], current: list[LabelInfo]) -> list[Change]:
    """What to create or restyle; labels not in labels.yaml are never touched."""
    have = {lb.name.lower(): lb for lb in current}  # GitHub label names are case-insensitive
    changes = []
    for want in desired:
        got = have.get(want.name.lower())
        if got is None:
            changes.append(Change("create", want, "missing"))
            continue
        why = [f"{field} {getattr(got, field)!r} -> {getattr(want, field)!r}"
               for field in ("name", "color", "description")
               if _norm(field, getattr(got, field)) != _norm(field, getattr(want, field))]
        if why:
            changes.append(Change("update", LabelInfo(got.name, want.color, want.description)
                                  if got.name != want.name else want, "; ".join(why)))
    return changes


def apply(port: GitHubPort, changes: list[Change]) -> None:
    for change in changes:
        if change.action == "create":
            port.create_label(change.label)
        else:
            port.update_label(change.label)


class LabelFamily:
    """Recognises and styles evalbot's labels: headline, per-model, context, regression."""

    def __init__(self, book: LabelBook) -> None:
        self.book = book
        self.static = {lb.name: lb for lb in desired_labels(book)}
        tiers = "|".join(re.escape(t) for t in book.model_tiers)
        self._model = re.compile(rf"^[a-z0-9][a-z0-9._-]*:(?:{tiers})$")

    def owns(self, name: str) -> bool:
        return (name in self.static or bool(self._model.match(name))
                or name.endswith("-context") or name.startswith("regression-"))

    def style(self, name: str) -> LabelInfo:
        if name in self.static:
            return self.static[name]
        if name.startswith("regression-"):
            return LabelInfo(name, _color(self.book.regression_color),
                             f"evalbot: slower at {name[len('regression-'):]}")
        if name.endswith("-context"):
            return LabelInfo(name, _color(self.book.context_color),
                             f"evalbot: best gain at {name[: -len('-context')]} context")
        return LabelInfo(name, _color(self.book.model_color), "evalbot: per-model verdict")


def _color(value: str) -> str:
    return str(value).lstrip("#").lower().zfill(6)


def _norm(field: str, value: str) -> str:
    return value.lower() if field == "color" else value
