"""A running job's PR, read on GitHub at each lease renewal (`evalbot worker --watch-pushes`).

With the one self-hosted runner of docs/setup.md (7a), the `work` job holds the runner while it
evaluates, so the `intake` job of a push waits behind it: the store would hear of the new head
only after the evaluation that head should have stopped. So the worker asks GitHub itself, at
each renewal of the job's lease (every lease_ttl/3: 20 s under the workflow's --lease-ttl 60):
one GET of the PR, 180 an hour while a job runs, of the 1,000 an hour a workflow's
GITHUB_TOKEN may spend on the repository.

When the head moved, the PR is handled exactly as its push would be by `intake`
(Handlers.reconcile: admission, the new head queued, the old job superseded, the old head's
status and the new head's pending comment); the renewal that follows finds the job no longer
ours and stops its run on the box, and `--until-idle` goes on with the new head. A head that
admission refuses (a fork's push waiting for its approval) supersedes nothing, as with
`intake`. A closed PR cancels its jobs, as `intake` does. The `intake` job of the push, once it
runs, finds the new head queued already (a repeated event). GitHub failing or rate-limiting the
read: the run goes on; the next renewal reads again, once the rate limit's wait is over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from evalbot.github.events import PullRequestEvent
from evalbot.github.port import GitHubError, GitHubPort, PullInfo, RateLimited
from evalbot.store.jobs import JobRow, Store

if TYPE_CHECKING:
    from evalbot.config.settings import Config
    from evalbot.github.handlers import Handlers

log = logging.getLogger("evalbot.worker")


class HeadWatch:
    """Called by a job's Renewal thread (its own store connection) before each renewal."""

    def __init__(self, repo: str, make_port: Callable[[], GitHubPort],
                 make_handlers: Callable[[Store, GitHubPort], Handlers],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.repo, self._make_port, self._make_handlers = repo, make_port, make_handlers
        self._clock = clock
        self._port: GitHubPort | None = None
        self._lock = threading.Lock()  # one port for the process: the boxes' renewals take turns
        self._quiet_until = 0.0  # a rate limit's wait

    def __call__(self, store: Store, job: JobRow) -> str | None:
        """What the PR's current state did to the job's queue; None: nothing moved."""
        if job.pr is None or job.repo != self.repo:
            return None  # an evaluation of no PR of ours (`evalbot eval`, another repository)
        with self._lock:
            if self._clock() < self._quiet_until:
                return None
            try:
                port = self._port = self._port or self._make_port()
                pull = port.pull(job.pr)
                if pull.head_sha == job.head_sha and pull.state == "open":
                    return None
                done = self._as_its_event(store, port, pull)
            except RateLimited as exc:
                self._quiet_until = self._clock() + exc.retry_after
                log.warning("job %s: the PR's head not read (%s); again in %.0f s", job.id,
                            exc, exc.retry_after)
                return None
            except GitHubError as exc:
                log.warning("job %s: the PR's head not read (%s); again at the next renewal",
                            job.id, exc)
                return None
        log.info("job %s: #%s on GitHub is %s at %s: %s", job.id, job.pr, pull.state,
                 pull.head_sha[:10], done)
        return done

    def _as_its_event(self, store: Store, port: GitHubPort, pull: PullInfo) -> str:
        """The PR handled as the event GitHub sent for it would be by `intake`."""
        handlers = self._make_handlers(store, port)
        if pull.state == "open":
            return handlers.reconcile(pull)
        return handlers.handle(PullRequestEvent(
            action="closed", repo=self.repo, number=pull.number, head_sha=pull.head_sha,
            base_sha=pull.base_sha, author=pull.author, sender=pull.author, draft=pull.draft,
            fork=pull.fork, labels=pull.labels, label=None))


def for_config(config: Config, token: str | None, throttle: bool) -> HeadWatch | None:
    """The watch on the config's repository with the worker's token; None without GitHub."""
    gh = config.github
    if gh is None or not token:
        return None
    from evalbot.github.service import make_handlers, make_port

    return HeadWatch(gh.repo, lambda: make_port(gh, token, throttle),
                     lambda store, port: make_handlers(config, store, port))
