"""`evalbot serve` (webhook endpoint + dispatcher + one worker per box), `evalbot worker` (the
workers alone: a second host, or GitHub Actions with --until-idle) and `evalbot regrade`.

All state lives in the SQLite store; any of these processes may be killed at any time and
started again (docs/service.md). At start-up the store's pending migrations are applied (after a
backup); SIGTERM drains the workers (evalbot.service.drain); `serve` also answers GET /metrics on its
own local listener (docs/operations.md).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalbot.audit.signing import KEY_ENV, SigningKey, load_signing_key
from evalbot.config.errors import ConfigError
from evalbot.config.redact import Redactor, for_boxes
from evalbot.config.settings import Config, load_config
from evalbot.evaluation.evaluate import regrade
from evalbot.evaluation.jobspec import witness_margin
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.grading.policy import Policy, load_labels
from evalbot.report.render import render_comment
from evalbot.service import drain, head_watch
from evalbot.service.health import MetricsApp, setup_json_logging
from evalbot.service.pool import check_pool
from evalbot.service.queue_metrics import process_gauges
from evalbot.service.secrets_rotation import ring_from_env
from evalbot.service.worker import Publish, Settings, Worker
from evalbot.store import migrations
from evalbot.store.jobs import JobRow, Store
from evalbot.store.owner import StoreInUse, StoreOwner

if TYPE_CHECKING:
    from evalbot.github.service import Listener, Running

log = logging.getLogger("evalbot.serve")  # the JSON logs carry this name: kept from before evalbot.service
CONFIG = click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)


@dataclass(frozen=True)
class Runtime:
    config: Config
    profile: Profile
    policy: Policy
    redact: Redactor
    token: str | None  # the GitHub token when the config has a github section
    throttle: bool = True  # space GitHub requests as GitHub asks (PyGithub's throttling)


def runtime(config_file: Path, token: str | None = None, throttle: bool = True) -> Runtime:
    config = load_config(config_file)
    profile = load_profile(config.profile)
    policy = load_labels(config.labels_file).policy(config.policy, str(config.labels_file))
    witness_margin(profile, policy)  # the pair is checked at start, not at the first job
    if config.github is not None:
        token = token or config.secret(config.github.token_env)
    hook = os.environ.get(config.github.webhook_secret_env, "") if config.github else ""
    redact = for_boxes(config.boxes, secrets=[s for s in (token, hook) if s])
    return Runtime(config, profile, policy, redact, token, throttle)


def github_publish(rt: Runtime) -> Publish | None:
    """One port and publisher per worker thread; None without a github section."""
    if rt.config.github is None or rt.token is None:
        return None
    from evalbot.github.service import make_port, make_publisher, publish_finished

    publisher = make_publisher(rt.config, make_port(rt.config.github, rt.token, rt.throttle))

    def publish(store: Store, job_id: str) -> None:
        publish_finished(store, publisher, job_id, rt.redact,  # False: nothing to say (newer)
                         rt.config.service.reports_url)
    return publish


def signing_key(config: Config) -> SigningKey | None:
    """The config's `service.signing_key_file`, else $EVALBOT_SIGNING_KEY_FILE, else none."""
    if config.service.signing_key_file is not None:
        return load_signing_key(config.service.signing_key_file)
    return load_signing_key() if os.environ.get(KEY_ENV) else None


def prepare_store(config: Config) -> None:
    """Apply pending migrations (each after a backup; a new store starts at the latest); a
    store written by a newer evalbot is refused (migrations.pending names the versions)."""
    for line in migrations.migrate(config.store):
        log.info("store migration: %s", line)
        click.echo(f"evalbot: store {config.store}: {line}")


def make_workers(rt: Runtime, settings: Settings, out_root: Path,
                 box_name: str | None = None) -> list[Worker]:
    boxes = check_pool(rt.config, rt.profile, serving=True)
    if box_name is not None:
        boxes = [b for b in boxes if b.name == box_name]
        if not boxes:
            raise ConfigError(f"{rt.config.source}: no eligible box named {box_name!r}")
    tag = f"{os.getpid()}-{secrets.token_hex(2)}"
    signer = signing_key(rt.config)
    return [Worker(f"{b.name}-{tag}", b, rt.profile, rt.policy, rt.config.store, out_root,
                   settings, github_publish(rt), lambda v: render_comment(v, rt.redact),
                   signer=signer)
            for b in boxes]


def run_workers(workers: list[Worker], until_idle: bool, grace_s: float,
                alive: Callable[[], bool] | None = None,
                on_signal: Callable[[], None] | None = None,
                owner: StoreOwner | None = None) -> None:
    """Run the workers until they end (--until-idle) or SIGTERM/SIGINT; then drain them: jobs
    in flight get grace_s to finish, the others' leases are handed back (not counted as tries).

    A service that can no longer do its work says so: when a worker thread (or, under `serve`,
    the dispatcher: `alive`) dies, the others are drained and the process exits non-zero, so
    its supervisor restarts it instead of it accepting work nobody does. So does a process
    whose store another host took over (`owner`, evalbot.store.owner).

    With `on_signal` (Actions mode, `--on-signal cancel`) a signal cancels the jobs in flight
    instead (evalbot.service.run_cancelled): GitHub kills the step seconds later."""
    stop = drain.on_signals()
    threads = [threading.Thread(target=w.run, args=(until_idle,), name=w.name, daemon=True)
               for w in workers]
    for t in threads:
        t.start()
    dead: list[str] = []
    while not stop.is_set() and any(t.is_alive() for t in threads) and not dead:
        stop.wait(0.5)  # short waits: the signal handler runs between them
        dead = _dead(threads, until_idle, alive) + (
            [f"the store's host record ({owner.lost})"] if owner and not owner.held() else [])
    if on_signal is not None and stop.is_set():
        for w in workers:
            w.stopping.set()
        on_signal()
        return
    report = drain.drain(workers[0].store_path, workers, grace_s=grace_s)
    if report.finished or report.handed_back:
        log.info("drained: finished %s, handed back %s", report.finished, report.handed_back)
    if dead:
        log.critical("%s died; exiting so that the service is restarted", ", ".join(dead))
        raise SystemExit(3)


def _dead(threads: list[threading.Thread], until_idle: bool,
          alive: Callable[[], bool] | None) -> list[str]:
    gone = [] if until_idle else [t.name for t in threads if not t.is_alive()]
    return gone + (["the dispatcher"] if alive is not None and not alive() else [])


def _owner(config: Config, serving: bool = False) -> StoreOwner:
    """This process's hold on the store (evalbot.store.owner), or the one-line refusal."""
    try:
        return StoreOwner(config.store, serving, beat_s=config.service.host_beat_s)
    except StoreInUse as exc:
        raise ConfigError(str(exc)) from None


def settings_options(fn: Any) -> Any:
    for option in reversed((
        click.option("--lease-ttl", type=float, default=Settings.lease_ttl_s, show_default=True,
                     help="seconds before a dead worker's job is taken again"),
        click.option("--max-tries", type=int, default=Settings.max_tries, show_default=True,
                     help="attempts per job for infra failures"),
        click.option("--retry-backoff", type=float, default=Settings.backoff_s,
                     show_default=True, help="first retry delay in seconds (doubles)"),
        click.option("--poll", type=float, default=Settings.poll_s, show_default=True,
                     help="seconds between looks at an empty queue"),
        click.option("--throttle/--no-throttle", default=True, show_default=True,
                     help="space GitHub requests (off only for a GitHub Enterprise Server "
                          "without secondary rate limits, or a local test server)"),
        click.option("--out", "out_root", type=click.Path(path_type=Path), default=None,
                     help="where results, verdicts and comments go (default: next to the store)"),
        click.option("--drain-grace", type=float, default=drain.DEFAULT_GRACE_S,
                     show_default=True, help="on SIGTERM, seconds for jobs in flight to finish "
                     "before their leases are handed back (keep below the supervisor's stop "
                     "timeout)"),
    )):
        fn = option(fn)
    return fn


def _settings(config: Config, lease_ttl: float, max_tries: int, retry_backoff: float,
              poll: float, drain_grace: float) -> Settings:
    if lease_ttl <= 0 or max_tries < 1 or retry_backoff < 0 or poll <= 0 or drain_grace < 0:
        raise click.BadParameter("--lease-ttl and --poll must be > 0, --max-tries >= 1, "
                                 "--retry-backoff and --drain-grace >= 0")
    return Settings(lease_ttl_s=lease_ttl, max_tries=max_tries, backoff_s=retry_backoff,
                    poll_s=poll, aa_every_s=config.service.aa_every_h * 3600.0,
                    publish_retry_s=config.service.publish_retry_s)


def _metrics(config: Config, running: Running | None) -> Listener | None:
    """GET /metrics on its own listener (local by default), never on the public webhook. A
    port in use is logged, not fatal: the webhook and the workers matter more."""
    from evalbot.github.service import PROCESS_BACKOFF, listen

    def process() -> list[str]:
        return process_gauges(PROCESS_BACKOFF.remaining(),
                              running.dispatcher.alive() if running is not None else None,
                              running.reconciler.progress
                              if running is not None and running.reconciler else None)

    svc = config.service
    try:
        return listen(MetricsApp(config.store, process), svc.metrics_host, svc.metrics_port,
                      "metrics")
    except OSError as exc:
        log.error("metrics: cannot listen on %s:%s: %s", svc.metrics_host, svc.metrics_port, exc)
        return None


@click.command()
@CONFIG
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", "listen_port", type=int, default=8080, show_default=True)
@settings_options
def serve(config_file: Path, host: str, listen_port: int, lease_ttl: float, max_tries: int,
          retry_backoff: float, poll: float, throttle: bool, out_root: Path | None,
          drain_grace: float) -> None:
    """The service: webhook endpoint, dispatcher, one worker per eligible box, metrics."""
    setup_json_logging()
    rt = runtime(config_file, throttle=throttle)
    settings = _settings(rt.config, lease_ttl, max_tries, retry_backoff, poll, drain_grace)
    workers = make_workers(rt, settings, out_root or rt.config.store.parent / "results")
    for w in workers:  # each its own publisher: PyGithub objects are not shared by threads
        w.on_start = ActionsRun(rt, "").started
    gh = rt.config.github
    ring = ring_from_env(os.environ, gh.webhook_secret_env) if gh is not None else None
    owner = _owner(rt.config, serving=True)  # one host, one serve: before any open
    prepare_store(rt.config)  # after the config's checks: a refused config changes nothing
    running = None
    if gh is not None and ring is not None:
        from evalbot.github.service import RECONCILE_S, make_port, start

        assert rt.token is not None
        log.info("webhook: %s", ring.describe())
        running = start(rt.config, ring.accepted, make_port(gh, rt.token, throttle), host,
                        listen_port, reconcile_s=RECONCILE_S,
                        reconcile_port=make_port(gh, rt.token, throttle))
    metrics = _metrics(rt.config, running)
    where = f"webhook on {host}:{running.port}" if running else "no webhook (no github section)"
    mode = " (shadow mode: nothing is written to GitHub)" if rt.config.service.shadow else ""
    click.echo(f"evalbot serve: {where}; {len(workers)} worker(s): "
               + ", ".join(w.box_config.name for w in workers) + mode, nl=True)
    if metrics is not None:
        click.echo(f"evalbot serve: metrics on {rt.config.service.metrics_host}:{metrics.port}")
    try:
        run_workers(workers, until_idle=False, grace_s=drain_grace,
                    alive=running.dispatcher.alive if running is not None else None,
                    owner=owner)
    finally:
        for part in (running, metrics):
            if part is not None:
                part.stop()
        owner.release()


@click.command()
@CONFIG
@click.option("--box", "box_name", default=None, help="only this box (default: every eligible)")
@click.option("--until-idle", is_flag=True, help="exit when no job is queued or running "
              "(GitHub Actions mode)")
@click.option("--on-signal", type=click.Choice(["drain", "cancel"]), default="drain",
              show_default=True, help="SIGINT/SIGTERM: drain (a service stopping: the runs go "
              "on for the next worker) or cancel the jobs in flight (GitHub Actions: the "
              "workflow run was cancelled)")
@click.option("--run-url", default="", help="this GitHub Actions run's URL: each job's pending "
              "commit status links to it, which is how `/evalbot cancel` finds the run")
@click.option("--watch-pushes", is_flag=True, help="read the running job's PR on GitHub at each "
              "lease renewal: a push supersedes the job then (Actions: `intake` waits for the "
              "busy runner)")
@settings_options
def worker(config_file: Path, box_name: str | None, until_idle: bool, on_signal: str,
           run_url: str, watch_pushes: bool, lease_ttl: float, max_tries: int,
           retry_backoff: float, poll: float, throttle: bool, out_root: Path | None,
           drain_grace: float) -> None:
    """Workers only: lease jobs from the store, evaluate, publish."""
    setup_json_logging()
    rt = runtime(config_file, throttle=throttle)
    settings = _settings(rt.config, lease_ttl, max_tries, retry_backoff, poll, drain_grace)
    workers = make_workers(rt, settings, out_root or rt.config.store.parent / "results",
                           box_name)
    owner = _owner(rt.config)  # another host's store is refused before it is opened
    prepare_store(rt.config)
    actions = ActionsRun(rt, run_url)
    watch = head_watch.for_config(rt.config, rt.token, throttle) if watch_pushes else None
    if watch_pushes and watch is None:
        raise ConfigError(f"{config_file}: --watch-pushes reads the PR on GitHub: the config "
                          "needs a `github:` section and its token")
    for w in workers:
        w.on_start, w.head_watch = actions.started, watch
    try:
        run_workers(workers, until_idle, grace_s=drain_grace, owner=owner,
                    on_signal=(lambda: actions.cancelled(workers)) if on_signal == "cancel"
                    else None)
    finally:
        owner.release()


class ActionsRun:
    """The worker as a GitHub Actions job: each job it starts links the PR's pending status to
    the run (what `/evalbot cancel` looks up), and a cancelled run cancels its jobs."""

    def __init__(self, rt: Runtime, run_url: str) -> None:
        self.rt, self.run_url = rt, run_url
        self._publisher: Any = None

    def publisher(self) -> Any:
        if self._publisher is None and self.rt.config.github is not None and self.rt.token:
            from evalbot.github.service import make_port, make_publisher

            self._publisher = make_publisher(self.rt.config, make_port(
                self.rt.config.github, self.rt.token, self.rt.throttle))
        return self._publisher

    def started(self, job: JobRow, box: str) -> None:
        """The PR's pending comment says where its job runs (the run page, the Actions run)
        and its status links the Actions run (evalbot.github.pending.announce_start)."""
        from evalbot.github.pending import announce_start

        publisher = self.publisher()
        if publisher is None or job.pr is None or self.rt.config.github is None:
            return
        store = Store(self.rt.config.store)
        try:
            announce_start(store, publisher, self.rt.config.github.status_context, job, box,
                           self.rt.config.service.reports_url, self.run_url)
        finally:
            store.close()

    def cancelled(self, workers: list[Worker]) -> None:
        from evalbot.github import texts
        from evalbot.service.run_cancelled import NOTE, cancel_in_flight

        publisher = self.publisher()

        def announce(job: JobRow) -> None:
            context = self.rt.config.github.status_context if self.rt.config.github else ""
            body = texts.pending_comment(job.head_sha, "cancelled", NOTE, context)
            publisher.publish(job.pr, job.head_sha, body, [], "error", "cancelled",
                              self.run_url)

        done = cancel_in_flight(self.rt.config.store, {w.name: w.box_config for w in workers},
                                announce if publisher is not None else None)
        log.info("the Actions run was cancelled: cancelled %s", done or "no job in flight")


@click.command("regrade")
@CONFIG
@click.option("--policy", "policy_name", default=None, help="default: the config's policy")
@click.option("--pr", type=int, default=None, help="only this PR")
def regrade_cmd(config_file: Path, policy_name: str | None, pr: int | None) -> None:
    """Grade stored results again under the current policy (no box time); changed verdicts are
    published by the next worker sweep (`evalbot serve`, or `evalbot worker --until-idle`)."""
    config = load_config(config_file)
    policy = load_labels(config.labels_file).policy(policy_name or config.policy,
                                                    str(config.labels_file))
    if not config.store.is_file():
        raise ConfigError(f"{config.store}: no such store")
    store = Store(config.store)
    repo = config.github.repo if config.github else None
    changes = regrade(store, policy, repo=repo, pr=pr, signer=signing_key(config))
    for job_id, old, new in changes:
        click.echo(f"{job_id}: {old} -> {new}")
    click.echo(f"{len(changes)} verdict(s) changed under {policy.ident}; "
               f"{len(store.history(repo=repo, pr=pr))} re-graded")


def register(group: click.Group) -> None:
    for command in (serve, worker, regrade_cmd):
        group.add_command(command)
