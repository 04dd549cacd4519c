"""Composition: build the port, publisher and handlers from the config; run the dispatcher and
the waitress server; publish a finished job's verdict (with its overrides and staleness)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from waitress.server import create_server

from evalbot.config.errors import ConfigError
from evalbot.config.redact import Redactor
from evalbot.config.settings import Config, GitHubConfig
from evalbot.engine.contract.verdict import upgrade as upgrade_verdict
from evalbot.engine.contract.verdict import validate as validate_verdict
from evalbot.github.dispatcher import Dispatcher
from evalbot.github.handlers import Handlers
from evalbot.github.labels_sync import LabelFamily
from evalbot.github.port import GitHubPort
from evalbot.github.publish import Backoff, Publisher, PublisherProtocol
from evalbot.github.reconcile import Reconciler
from evalbot.github.webhook import SERVER_SETTINGS, WebhookApp
from evalbot.github.writing import PrLocks
from evalbot.grading.overrides import decorate, status_of
from evalbot.grading.policy import load_labels
from evalbot.report.comment import context_for
from evalbot.report.render import render_comment
from evalbot.store.jobs import Store
from evalbot.store.overrides import Overrides

__all__ = ["RECONCILE_S", "Dispatcher", "Running", "start"]  # Dispatcher: evalbot.github.dispatcher
log = logging.getLogger("evalbot.github")
# One token, one rate limit: every publisher of the process (dispatcher and workers) shares
# one back-off, so a Retry-After seen by any of them holds back all of them.
PROCESS_BACKOFF = Backoff()
RECONCILE_S = 300.0  # GitHub does not redeliver what failed while we were down: look this often


def github_config(config: Config) -> GitHubConfig:
    if config.github is None:
        raise ConfigError(f"{config.source}: a `github:` section is required for this command")
    return config.github


def make_port(gh: GitHubConfig, token: str, throttle: bool = True) -> GitHubPort:
    from evalbot.github.app_auth import github_auth
    from evalbot.github.pygithub_client import PyGithubPort

    return PyGithubPort(gh.repo, github_auth(gh, token), gh.api_url, throttle=throttle,
                        request_interval_s=gh.request_interval_s,
                        write_interval_s=gh.write_interval_s)


def process_backoff(gh: GitHubConfig) -> Backoff:
    """PROCESS_BACKOFF, waiting the config's retry_wait_s before a transient error's retry (a
    process runs one config)."""
    PROCESS_BACKOFF.transient_wait_s = gh.retry_wait_s
    return PROCESS_BACKOFF


def make_publisher(config: Config, port: GitHubPort,
                   backoff: Backoff | None = None) -> PublisherProtocol:
    """The GitHub publisher; in shadow mode (`service: {shadow: true}`) the ShadowPublisher,
    which records every write in the store and writes nothing to GitHub."""
    from evalbot.github.app_auth import identified

    gh = identified(config)
    if config.service.shadow:
        from evalbot.github.shadow import ShadowPublisher

        return ShadowPublisher(config.store, config.service.shadow_log, gh.bot_login,
                               gh.status_context, backoff or process_backoff(gh))
    return Publisher(port, gh.bot_login, LabelFamily(load_labels(config.labels_file)),
                     gh.status_context, backoff or process_backoff(gh), config.service.reports_url)


def make_handlers(config: Config, store: Store, port: GitHubPort,
                  backoff: Backoff | None = None, locks: PrLocks | None = None) -> Handlers:
    from evalbot.github.app_auth import identified

    policy = load_labels(config.labels_file).policy(config.policy, str(config.labels_file))
    return Handlers(identified(config), store, port, make_publisher(config, port, backoff),
                    policy.ident, locks)


@dataclass
class Listener:
    """A waitress server on its own thread (the metrics endpoint, next to the webhook's)."""

    server: Any
    thread: threading.Thread
    port: int

    def stop(self) -> None:
        _stop_waitress(self.server)
        self.thread.join(timeout=10)


def listen(app: Any, host: str, port: int, name: str) -> Listener:
    server = create_server(app, host=host, port=port, threads=2)
    thread = threading.Thread(target=server.run, daemon=True, name=name)
    thread.start()
    return Listener(server, thread, int(server.effective_port))


@dataclass
class Running:
    server: object
    dispatcher: Dispatcher
    threads: tuple[threading.Thread, ...]
    port: int
    reconciler: Reconciler | None = None  # stopped with the dispatcher (one `stopping`)

    def stop(self) -> None:
        self.dispatcher.stopping.set()
        self.dispatcher.wake.set()
        _stop_waitress(self.server)
        for t in self.threads:
            t.join(timeout=10)


def _stop_waitress(server: Any) -> None:
    """Close every socket from inside waitress's own loop thread (its trigger runs thunks
    there); the loop ends once its map is empty. Closing from another thread races select()."""
    def close_all() -> None:
        for channel in list(server._map.values()):
            channel.close()
    server.task_dispatcher.shutdown(timeout=5)
    server.trigger.pull_trigger(close_all)


def start(config: Config, secret: bytes | Callable[[], Sequence[bytes]], port: GitHubPort,
          host: str = "127.0.0.1", listen_port: int = 0,
          backoff: Backoff | None = None,
          server_settings: dict[str, Any] | None = None,
          reconcile_s: float | None = None, retry_s: float | None = None,
          reconcile_port: GitHubPort | None = None) -> Running:
    """The waitress server and the dispatcher, each on a thread; returns the bound port.

    `secret` is the webhook secret, or a callable giving the secrets accepted right now
    (`SecretRing.accepted`: the new one and, during a rotation, the old one). waitress runs
    with `webhook.SERVER_SETTINGS` unless `server_settings` replaces them (the bench compares).
    `reconcile_s`: compare open PRs' heads with the store at start and this often after each
    pass (None: never; `serve` and `webhook` do), on its own thread with its own
    `reconcile_port` (PyGithub objects are not shared between threads). `retry_s`: the first
    wait before a delivery or a reconcile pass that met a passing fault is tried again (None:
    the config's `github.delivery_retry_s`)."""
    if reconcile_s is not None and reconcile_port is None:
        raise ValueError("the reconcile needs a GitHub port of its own (reconcile_port)")
    if retry_s is None:
        retry_s = github_config(config).delivery_retry_s
    wake, locks = threading.Event(), PrLocks()
    store = Store(config.store)
    store.close()
    dispatcher = Dispatcher(lambda s: make_handlers(config, s, port, backoff, locks),
                            config.store, wake,
                            pause=backoff.sleep if backoff is not None else None, retry_s=retry_s)
    app = WebhookApp(secret, str(config.store), wake, alive=dispatcher.alive)
    server = create_server(app, host=host, port=listen_port,
                           **(SERVER_SETTINGS if server_settings is None else server_settings))
    threads = [threading.Thread(target=server.run, daemon=True, name="webhook"),
               threading.Thread(target=dispatcher.run, daemon=True, name="dispatcher")]
    reconciler = None
    if reconcile_s is not None and reconcile_port is not None:
        reconciler = Reconciler(
            lambda s: make_handlers(config, s, reconcile_port, backoff, locks), config.store,
            reconcile_s, dispatcher.stopping, retry_s)
        threads.append(threading.Thread(target=reconciler.run, daemon=True, name="reconcile"))
    for t in threads:
        t.start()
    return Running(server, dispatcher, tuple(threads), int(server.effective_port), reconciler)


def publish_finished(store: Store, publisher: PublisherProtocol, job_id: str,
                     redact: Redactor, reports_url: str = "") -> bool:
    """After the worker stored a verdict (done, or failed for good with an error verdict):
    publish it unless a newer job of the PR is queued, running or finished. A maintainer's
    waiver turns the status green and the overrides show in the comment (evalbot.grading.overrides);
    a verdict measured against an older main says so."""
    job = store.get(job_id)
    if job.pr is None or job.state not in ("done", "failed"):
        return False
    jobs = store.pr_jobs(job.repo, job.pr)
    later = jobs[[j.id for j in jobs].index(job.id) + 1:]
    if any(j.state in ("queued", "running", "done", "failed") for j in later) or any(
            j.state in ("queued", "running") for j in jobs):
        return False  # the newer job's comment stays; its verdict will replace it
    found = [h for h in store.history(job.repo, job.pr, job.head_sha) if h["job_id"] == job.id]
    if not found:
        return False  # failed before the error verdict existed (an old store): nothing to say
    shown = found[0]["verdict"]
    if found[0]["stale"]:
        shown = {**shown, "main_moved": _current_main(store, job.repo, job.base_sha)}
    context = context_for(store.history(repo=job.repo), shown, job.repo, reports_url)
    comment = render_comment(shown, redact, context=context, results=found[0].get("results"))
    book = Overrides(store.path)
    try:
        trail = book.trail(job.repo, job.pr)
    finally:
        book.close()
    verdict, comment = decorate(trail, found[0]["verdict"], comment)
    waived = status_of(verdict)
    if waived is None:
        publisher.publish_verdict(job.pr, verdict, comment)
    else:  # a waived verdict goes out as a plain publish: checked here, as publish_verdict does
        validate_verdict(upgrade_verdict(verdict))
        publisher.publish(job.pr, job.head_sha, comment, list(verdict["labels"]), *waived)
    return True


def _current_main(store: Store, repo: str, measured: str) -> str:
    """Main as the latest job to start on another base saw it (workers resolve main at each
    start; only for rendering: the stored verdict keeps the base it was measured against)."""
    started = [j for j in store.jobs() if j.repo == repo and j.started and j.base_sha
               and j.base_sha != measured]
    return max(started, key=lambda j: j.started or 0.0).base_sha if started else ""
