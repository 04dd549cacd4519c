"""Everything published passes here: secrets, token shapes, box hosts, addresses, ports, user@host.

Each configured literal (secret, host, path) is masked in the encodings a hostile build can
produce from what it reads on the box: any case, reversed, hex, base64 (every alignment, standard
and URL-safe), and letter-spaced (up to three separators between characters). What may be
published at all (no log tail, no PR output, no figure the bot does not believe) is
evalbot/report/publication.py's rule; this is the last pass over the text.
"""

from __future__ import annotations

import base64
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
_SEPARATORS = r"[\W_]{0,3}"  # what a letter-spacing encoding puts between characters
_MIN_VARIANT = 4  # shorter encodings would mask ordinary words


def _base64_cores(raw: bytes) -> list[str]:
    """The base64 characters that depend on `raw` alone, at each of the three alignments."""
    out = []
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * shift + raw).decode().rstrip("=")
            start, end = -(-8 * shift // 6), 8 * (shift + len(raw)) // 6
            out.append(text[start:end])
    return out


def _variants(literal: str) -> set[str]:
    raw = literal.encode()
    found = {literal, literal[::-1], raw.hex(), *_base64_cores(raw)}
    return {v for v in found if len(v) >= _MIN_VARIANT} | {literal}


def _pattern(variant: str) -> re.Pattern[str]:
    return re.compile(_SEPARATORS.join(re.escape(c) for c in variant), re.IGNORECASE)


class Redactor:
    def __init__(self, literals: Iterable[str] = ()) -> None:
        # Longest first, so a host name inside a longer secret does not leave half of it.
        self.literals = sorted({s for s in literals if s and len(s) >= 3}, key=len, reverse=True)
        variants = sorted({v for lit in self.literals for v in _variants(lit)}, key=len,
                          reverse=True)
        self._encoded = [_pattern(v) for v in variants]

    def __call__(self, text: str) -> str:
        # Patterns first: `user@host:port` must go as a whole before its host part is masked.
        for pattern in _PATTERNS:
            text = pattern.sub(MASK, text)
        for pattern in self._encoded:
            text = pattern.sub(MASK, text)
        return text


def for_boxes(boxes: Iterable[object], secrets: Iterable[str] = ()) -> Redactor:
    """A redactor that knows each box's host, paths and non-default port.

    The login name alone is not redacted (it is often a word like `evalbot`); `user@host`
    forms are, by pattern. Nor is a relative path of one component (`workdir: box`): it says
    nothing about the host, and masking it would rewrite every "box" in the text.
    """
    literals = list(secrets)
    for box in boxes:
        host = getattr(box, "host", None)
        if isinstance(host, str):
            literals.append(host)
        for attr in ("key_file", "known_hosts", "workdir", "repo", "models_dir"):
            value = getattr(box, attr, None)
            if isinstance(value, str) and "/" in value:
                literals.append(value)
        port = getattr(box, "port", 22)
        if port and port != 22:
            literals.append(f":{port}")
            literals.append(f"port {port}")
            literals.append(f"port={port}")
    return Redactor(literals)


_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^@/]*)@")


def without_credentials(url: str) -> str:
    """A repository URL without the credentials it may carry (`https://TOKEN@host/…`,
    `https://user:password@host/…`): what job.json holds on the box. An ssh URL keeps its login
    name (`ssh://git@host/…`, `git@host:…`: a name, not a secret) and loses a password. Git
    on the box gets credentials from the harness user's credential helper (docs/box.md)."""
    found = _USERINFO.match(url)
    if found is None:
        return url
    scheme, user = found["scheme"], found["user"]
    kept = f"{user.split(':', 1)[0]}@" if scheme.lower().startswith("ssh") and user else ""
    return scheme + kept + url[found.end():]
