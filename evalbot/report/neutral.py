"""Untrusted text made inert for GitHub markdown: no mentions, no fence breaks, no HTML.

Shared by the renderer (log tails, paths) and every reply the GitHub side writes. GitHub links
`@login` and `@org/team` wherever `@` follows a non-word character outside code; a zero-width
space after the `@` keeps the text readable and notifies nobody.
"""

from __future__ import annotations

import re

_MENTION = re.compile(r"@(?=[A-Za-z0-9_])")
ZWSP = "\u200b"
ECHO_CAP = 60  # characters of a user's word echoed back in a reply


def neutral(text: str) -> str:
    """Untrusted text inside a fence: no fence breaks, mentions, markers or HTML."""
    return (text.replace("```", "ʼʼʼ").replace("@", "@" + ZWSP).replace("<", "&lt;")
            .replace(">", "&gt;"))


def quiet_mentions(text: str) -> str:
    """Every `@name` made inert (code spans included: harmless there, and simpler to trust)."""
    return _MENTION.sub("@" + ZWSP, text)


def code_span(text: str) -> str:
    """A user's word quoted as inline code it cannot leave: backticks replaced, one line,
    capped, mentions quieted (inside code GitHub links nothing, but belt and braces)."""
    flat = " ".join(text.split()).replace("`", "ʼ")
    if len(flat) > ECHO_CAP:
        flat = flat[:ECHO_CAP] + "…"
    return f"`{quiet_mentions(flat)}`" if flat else "` `"
