"""Everything published passes here: secrets, token shapes, box hosts, addresses, ports, user@host."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PATTERNS = [
    re.compile(r"gh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"github_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"hf_[A-Za-z0-9]{20,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\b[\w.-]+@[\w-]+(\.[\w-]+)+(:\d+)?\b"),  # user@host[:port]
    re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b"),  # IPv4[:port]
    re.compile(r"\b(?:[0-9a-fA-F]{1,4}:){3,7}[0-9a-fA-F]{1,4}\b"),  # IPv6 (full forms)
]
MASK = "[redacted]"


class Redactor:
    def __init__(self, literals: Iterable[str] = ()) -> None:
        # Longest first, so a host name inside a longer secret does not leave half of it.
        self.literals = sorted({s for s in literals if s and len(s) >= 3}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        # Patterns first: `user@host:port` must go as a whole before its host part is masked.
        for pattern in _PATTERNS:
            text = pattern.sub(MASK, text)
        for literal in self.literals:
            text = text.replace(literal, MASK)
        return text


def for_boxes(boxes: Iterable[object], secrets: Iterable[str] = ()) -> Redactor:
    """A redactor that knows each box's host, paths and non-default port.

    The login name alone is not redacted (it is often a word like `evalbot`); `user@host`
    forms are, by pattern.
    """
    literals = list(secrets)
    for box in boxes:
        for attr in ("host", "key_file", "known_hosts", "workdir", "repo", "models_dir"):
            value = getattr(box, attr, None)
            if isinstance(value, str):
                literals.append(value)
        port = getattr(box, "port", 22)
        if port and port != 22:
            literals.append(f":{port}")
            literals.append(f"port {port}")
    return Redactor(literals)
