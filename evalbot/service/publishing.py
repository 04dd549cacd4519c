"""The workers' publication sweep: every finished job not yet on GitHub, one PR's fault its own.

Errors are handled by class (the port's kinds, evalbot.github.port):
- a rate limit is the token's: the sweep stops, and the job waits for GitHub's Retry-After or
  reset (the shared Backoff's gate holds every other publisher back too);
- 5xx and timeouts may pass: that job is tried again after an exponential back-off with jitter,
  capped at five minutes, and the sweep goes on with the next job;
- 401, 404, 410, 422 and a 403 that is no rate limit (a locked conversation, a missing
  permission) will not pass: given up at once, with a log line, a count in /metrics and the
  reason in `evalbot status --json`.
A job's publication is claimed first, so a second worker on the store never writes the same PR.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from evalbot.config.errors import EvalbotError
from evalbot.github.port import GitHubError, RateLimited, Transient
from evalbot.store.jobs import Store

log = logging.getLogger("evalbot.worker")
FIRST_RETRY_S = 5.0
CAP_S = 300.0
CLAIM_S = 300.0  # longer than one publication takes with every retry inside it
Publish = Callable[[Store, str], None]


def publish_pending(store: Store, publish: Publish | None, owner: str,
                    first_retry_s: float = FIRST_RETRY_S) -> list[str]:
    """Publish what is due; returns one line per job tried (for logs and tests)."""
    lines: list[str] = []
    for job_id in store.due_unpublished():
        if publish is None:
            store.mark_published(job_id)  # no GitHub: the outputs on disk are the result
            continue
        if not store.claim_publication(job_id, owner, CLAIM_S):
            continue  # another worker is publishing it right now
        line, stop = _one(store, publish, job_id, first_retry_s)
        lines.append(f"{job_id}: {line}")
        if stop:
            break
    return lines


def _one(store: Store, publish: Publish, job_id: str, first_retry_s: float) -> tuple[str, bool]:
    """(what happened, whether the sweep must stop: a rate limit holds every job back)."""
    try:
        publish(store, job_id)
    except RateLimited as exc:
        store.publish_later(job_id, first_retry_s, CAP_S, at_least_s=exc.retry_after)
        log.warning("job %s: publishing rate-limited; again in %.0f s", job_id, exc.retry_after)
        return "rate-limited", True
    except Transient as exc:
        wait = store.publish_later(job_id, first_retry_s, CAP_S)
        log.warning("job %s: publishing failed (%s); again in %.0f s", job_id, exc, wait)
        return f"retry in {wait:.1f} s", False
    except GitHubError as exc:
        store.give_up_publishing(job_id, str(exc))
        log.error("job %s: not published, given up: %s", job_id, exc)
        return f"given up: {exc}", False
    except EvalbotError as exc:  # a store or render failure: may pass, like a 5xx
        wait = store.publish_later(job_id, first_retry_s, CAP_S)
        log.warning("job %s: publishing failed (%s); again in %.0f s", job_id, exc, wait)
        return f"retry in {wait:.1f} s", False
    store.mark_published(job_id)
    return "published", False
