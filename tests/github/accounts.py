"""The accounts the tests use, and the back-off they publish with."""

from __future__ import annotations

from evalbot.github.publish import Backoff

BOT = "evalbot[bot]"
MAINTAINER = "Codertocat"  # owner of the examples' repository
OUTSIDER = "mallory"  # a fork contributor without write access


def fast_backoff() -> Backoff:
    """Real waits, shortened only where GitHub gives no Retry-After (transient 5xx)."""
    return Backoff(transient_wait_s=0.05)
