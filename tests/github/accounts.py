"""The accounts the tests use, and the back-off they publish with."""

from __future__ import annotations

from evalbot.github.publish import Backoff

BOT = "evalbot[bot]"
MAINTAINER = "Codertocat"  # owner of the examples' repository
OUTSIDER = "mallory"  # a fork contributor without write access


# A config's `github:` keys (GitHubConfig) for the same pacing as fast_backoff: PyGithub's throttle
# and the transient retry still run, at intervals a test against the fake GitHub need not wait out.
PACING = ("  request_interval_s: 0.01\n  write_interval_s: 0.05\n  retry_wait_s: 0.05\n"
          "  delivery_retry_s: 0.2\n")


def fast_backoff() -> Backoff:
    """Real waits, shortened only where GitHub gives no Retry-After (transient 5xx)."""
    return Backoff(transient_wait_s=0.05)
