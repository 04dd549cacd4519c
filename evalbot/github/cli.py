"""CLI commands for GitHub: webhook, poll, rerun, action, labels sync. Thin over the modules."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import Config, load_config
from evalbot.github import labels_sync
from evalbot.github.events import parse_event
from evalbot.github.handlers import Handlers
from evalbot.github.service import RECONCILE_S, github_config, make_handlers, make_port, start
from evalbot.grading.policy import load_labels
from evalbot.service.pool import require_sandbox
from evalbot.store.jobs import Store
from evalbot.store.owner import StoreInUse, StoreOwner

CONFIG = click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)


def _setup(config_file: Path, token: str | None = None) -> tuple[Config, Handlers]:
    config = load_config(config_file)
    gh = github_config(config)
    port = make_port(gh, token or config.secret(gh.token_env))
    return config, make_handlers(config, Store(config.store), port)


@click.command()
@CONFIG
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", "listen_port", type=int, default=8080, show_default=True)
def webhook(config_file: Path, host: str, listen_port: int) -> None:
    """Serve the signed webhook endpoint (waitress) and the dispatcher that creates jobs."""
    config = load_config(config_file)
    gh = github_config(config)
    token = config.secret(gh.token_env)
    try:  # it runs the dispatcher, as serve does: one per store, one host per store
        owner = StoreOwner(config.store, serving=True, beat_s=config.service.host_beat_s)
    except StoreInUse as exc:
        raise EvalbotError(str(exc)) from None
    running = start(config, config.secret(gh.webhook_secret_env).encode(),
                    make_port(gh, token), host, listen_port, reconcile_s=RECONCILE_S,
                    reconcile_port=make_port(gh, token))
    click.echo(f"evalbot webhook on {host}:{running.port} for {gh.repo}")
    try:
        while running.dispatcher.alive() and owner.held():  # else exit non-zero
            time.sleep(1.0)
        raise click.ClickException("the dispatcher died (see the log); deliveries are no "
                                   "longer handled")
    finally:
        running.stop()
        owner.release()


@click.command()
@CONFIG
def poll(config_file: Path) -> None:
    """Create jobs from the listing of open PRs (for setups without a public endpoint)."""
    _config, handlers = _setup(config_file)
    for line in handlers.poll():
        click.echo(line)


@click.command()
@CONFIG
@click.argument("sha")
def rerun(config_file: Path, sha: str) -> None:
    """Queue the open PR whose head is SHA again, as a maintainer (a new attempt)."""
    _config, handlers = _setup(config_file)
    try:
        click.echo(handlers.rerun_sha(sha, "cli"))
    except ValueError as exc:
        raise EvalbotError(str(exc)) from exc


@click.command()
@CONFIG
def action(config_file: Path) -> None:
    """GitHub Actions mode: handle the event file the platform provides (GITHUB_EVENT_PATH)."""
    name, path = os.environ.get("GITHUB_EVENT_NAME"), os.environ.get("GITHUB_EVENT_PATH")
    if not name or not path:
        raise EvalbotError("GITHUB_EVENT_NAME and GITHUB_EVENT_PATH must be set (Actions mode)")
    require_sandbox(load_config(config_file))  # the next step runs the jobs it queues: refuse first
    config, handlers = _setup(config_file, os.environ.get("GITHUB_TOKEN"))
    # The shipped workflow runs on pull_request_target (from the base branch): its payload is
    # a pull_request event's.
    name = "pull_request" if name == "pull_request_target" else name
    event = parse_event(name, json.loads(Path(path).read_text()))
    click.echo("ignored: not an event evalbot handles" if event is None
               else handlers.handle(event))


@click.group()
def labels() -> None:
    """The label set of labels.yaml on GitHub."""


@labels.command("sync")
@CONFIG
@click.option("--dry-run", is_flag=True, help="print the changes, apply nothing")
def labels_sync_cmd(config_file: Path, dry_run: bool) -> None:
    """Create and restyle the repository's labels from labels.yaml (never deletes any)."""
    config = load_config(config_file)
    gh = github_config(config)
    port = make_port(gh, config.secret(gh.token_env))
    changes = labels_sync.diff(labels_sync.desired_labels(load_labels(config.labels_file)),
                               port.repo_labels())
    for change in changes:
        click.echo(f"{change.action} {change.label.name}: {change.why}")
    if not dry_run:
        labels_sync.apply(port, changes)
    click.echo(f"{len(changes)} change(s){' (dry run)' if dry_run else ''}")


def register(group: click.Group) -> None:
    for command in (webhook, poll, rerun, action, labels):
        group.add_command(command)
