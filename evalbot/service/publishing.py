"""The workers' publication sweep: every finished job not yet on GitHub, one PR's fault its own.

Errors are handled by class (the port's kinds, evalbot.github.port; docs/service.md, "Errors by
class"):
- a rate limit is the token's: the sweep stops, and the job waits for GitHub's Retry-After or
  reset (the shared Backoff's gate holds every other publisher back too);
- a 401 is the token's too: the sweep stops and the job waits out a back-off, never given up, so
  it is published once the credentials work again;
- 5xx and timeouts may pass: that job is tried again after an exponential back-off with jitter,
  capped at five minutes, and the sweep goes on with the next job;
- 404 on the PR, 409, 410, 422 and a 403 that is no rate limit (a locked conversation, a missing
  permission) will not pass: given up at once, with a log line, a count in /metrics and the
  reason in `evalbot status --json` (a 404 on the comment is the publisher's: a new one is made);
- the store failing (locked, full, I/O: evalbot.store.schema) is every job's: the sweep stops,
  nothing is recorded (the store may not take it), and the worker's `Hold` keeps the next sweep
  back a while.
The PR is claimed first (evalbot.github.writing), so nobody else writes it meanwhile: not a
second worker, not the dispatcher admitting a newer head.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import ServiceConfig
from evalbot.github.hold import Hold
from evalbot.github.port import GitHubError, RateLimited, Transient, Unauthorized
from evalbot.github.writing import Busy, writing
from evalbot.store.jobs import Store
from evalbot.store.schema import Error as StoreError
from evalbot.store.schema import passing_fault

log = logging.getLogger("evalbot.worker")
FIRST_RETRY_S = ServiceConfig.publish_retry_s  # the config's default
CAP_S = 300.0
Publish = Callable[[Store, str], None]


def publish_pending(store: Store, publish: Publish | None, owner: str,
                    first_retry_s: float = FIRST_RETRY_S, hold: Hold | None = None) -> list[str]:
    """Publish what is due; returns one line per job tried (for logs and tests). `hold`: the
    worker's, closed while the store fails."""
    if hold is not None and not hold.open():
        return []
    try:
        lines = _sweep(store, publish, owner, first_retry_s)
    except StoreError as exc:
        kind = passing_fault(exc)
        if kind is None:
            raise
        wait = hold.fault() if hold is not None else 0.0
        log.warning("publishing: the store failed (%s: %s); no publication for %.0f s", kind,
                    exc, wait)
        return [f"store {kind}: held for {wait:.0f} s"]
    if hold is not None:
        hold.clear()
    return lines


def _sweep(store: Store, publish: Publish | None, owner: str, first_retry_s: float) -> list[str]:
    lines: list[str] = []
    for job_id in store.due_unpublished():
        if publish is None:
            store.mark_published(job_id)  # no GitHub: the outputs on disk are the result
            continue
        job = store.get(job_id)
        assert job.pr is not None  # due_unpublished lists PR jobs only
        try:
            with writing(store, job.repo, job.pr, owner):
                if store.get(job_id).published is not None:
                    continue  # another writer published it between our listing and our claim
                line, stop = _one(store, publish, job_id, first_retry_s)
        except Busy:
            continue  # another writer has the PR right now: the next sweep
        lines.append(f"{job_id}: {line}")
        if stop:
            break
    return lines


def _one(store: Store, publish: Publish, job_id: str, first_retry_s: float) -> tuple[str, bool]:
    """(what happened, whether the sweep must stop: a rate limit or a refused token holds every
    job back)."""
    try:
        publish(store, job_id)
    except RateLimited as exc:
        store.publish_later(job_id, first_retry_s, CAP_S, at_least_s=exc.retry_after)
        log.warning("job %s: publishing rate-limited; again in %.0f s", job_id, exc.retry_after)
        return "rate-limited", True
    except Unauthorized as exc:
        wait = store.publish_later(job_id, first_retry_s, CAP_S)
        log.error("job %s: %s; again in %.0f s", job_id, exc, wait)
        return f"credentials refused; again in {wait:.1f} s", True
    except Transient as exc:
        wait = store.publish_later(job_id, first_retry_s, CAP_S)
        log.warning("job %s: publishing failed (%s); again in %.0f s", job_id, exc, wait)
        return f"retry in {wait:.1f} s", False
    except GitHubError as exc:
        store.give_up_publishing(job_id, str(exc))
        log.error("job %s: not published, given up: %s", job_id, exc)
        return f"given up: {exc}", False
    except EvalbotError as exc:  # a render failure: may pass, like a 5xx
        wait = store.publish_later(job_id, first_retry_s, CAP_S)
        log.warning("job %s: publishing failed (%s); again in %.0f s", job_id, exc, wait)
        return f"retry in {wait:.1f} s", False
    store.mark_published(job_id)
    return "published", False
