"""The command line: thin commands over the modules; EvalbotError exits 1 with one line."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalbot.config.errors import EvalbotError
from evalbot.lazy_group import LazyGroup

if TYPE_CHECKING:  # imported inside each command: `evalbot --help` stays fast
    from rich.table import Table

DEMO_PRS = ("faster", "neutral", "slow_long", "broken")  # evalbot.evaluation.demo.EXPECTED's keys, in order
# Every command that lives in its own module: imported only when it runs (evalbot.lazy_group).
COMMANDS = {
    "action": ("evalbot.github.cli:action",
               "GitHub Actions mode: handle the event file the platform provides (GITHUB_EVENT_PATH)."),
    "backup": ("evalbot.service.migrations:backup_cmd",
               "Copy the store while the service runs (SQLite online backup), integrity-checked."),
    "box": ("evalbot.service.boxinit:box_group", "Set up and inspect GPU boxes."),
    "box-time": ("evalbot.report.box_time_view:box_time_cmd",
                 "Print each results file's box time per stage, its total and its largest stage."),
    "calibrate": ("evalbot.service.calibrate:calibrate_cmd",
                  "A/A on a box: store each cell's noise as its sd floor, and each witness's."),
    "dashboard": ("evalbot.report.dashboard:dashboard",
                  "Write the static dashboard: main's speed over time, recent verdicts, box noise."),
    "doctor": ("evalbot.service.doctor:doctor",
               "Check the config, profile and policy, then each box, its models, and the secrets."),
    "files": ("evalbot.config.files_cli:files",
              "List the files shipped for you to copy out (example config, workflows), or print one."),
    "housekeep": ("evalbot.service.upkeep:housekeep",
                  "Evict old job directories, builds and reference caches on the boxes."),
    "keys": ("evalbot.audit.signing_cli:keys_group", "Manage the verdict signing key."),
    "labels": ("evalbot.github.cli:labels", "The label set of labels.yaml on GitHub."),
    "metrics": ("evalbot.service.health:metrics_cmd",
                "Print the Prometheus metrics of the store (for a textfile collector or a quick look)."),
    "migrate": ("evalbot.service.migrations:migrate_cmd",
                "Bring the store's schema up to this evalbot's version (backup first)."),
    "poll": ("evalbot.github.cli:poll",
             "Create jobs from the listing of open PRs (for setups without a public endpoint)."),
    "regrade": ("evalbot.service.serve:regrade_cmd",
                "Grade stored results again under the current policy (no box time); changed verdicts "
                "are published by the next worker sweep (`evalbot serve`, or `evalbot worker "
                "--until-idle`)."),
    "reproduce": ("evalbot.audit.reproduce:reproduce",
                  "Print the commands that repeat a verdict's measurement on another box."),
    "rerun": ("evalbot.github.cli:rerun",
              "Queue the open PR whose head is SHA again, as a maintainer (a new attempt)."),
    "rounds": ("evalbot.github.rounds:rounds_cmd",
               "Run one round: merge-first label, auto-merge, stale PRs (each only if configured)."),
    "serve": ("evalbot.service.serve:serve",
              "The service: webhook endpoint, dispatcher, one worker per eligible box, metrics."),
    "shadow-report": ("evalbot.github.shadow_report:shadow_report",
                      "Agreement per PR between evalbot's shadow verdicts and the existing bot's labels."),
    "verify": ("evalbot.audit.signing_cli:verify",
               "Check verdict JSON files against the published public keys; exit 1 on the first bad one."),
    "warm-reference": ("evalbot.service.warm_reference:warm_reference_cmd",
                       "Cache the reference of the profile's whole correctness grid on a box "
                       "(resumable)."),
    "webhook": ("evalbot.github.cli:webhook",
                "Serve the signed webhook endpoint (waitress) and the dispatcher that creates jobs."),
    "witness-cut": ("evalbot.service.witness_cut:witness_cut_cmd",
                    "List stored verdicts without a tier only because a witness was cut for box time."),
    "worker": ("evalbot.service.serve:worker", "Workers only: lease jobs from the store, evaluate, publish."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalbot", prog_name="evalbot")
def cli() -> None:
    """evalbot grades performance pull requests of GPU LLM inference engines."""


@cli.command()
@click.option("--out", type=click.Path(path_type=Path), default=Path("evalbot-demo"),
              show_default=True, help="where comment.md and verdict.json per PR go")
@click.option("--seed", type=int, default=None, help="correctness seed (default: fresh)")
@click.option("--json", "as_json", is_flag=True, help="print the verdicts as JSON")
@click.option("--only", "only", multiple=True, type=click.Choice(DEMO_PRS),
              help="evaluate only this demo PR (repeatable; default: all four)")
def demo(out: Path, seed: int | None, as_json: bool, only: tuple[str, ...]) -> None:
    """Run the whole pipeline on the bundled demo engine (no GPU, no GitHub)."""
    from rich.markup import escape

    from evalbot.cli_console import output_console
    from evalbot.evaluation.demo import EXPECTED, run_demo

    console = output_console(stderr=as_json, min_width=120)
    started = time.monotonic()
    results = run_demo(out, console, seed=seed, only=only)
    if as_json:
        click.echo(json.dumps({r.name: r.outcome.verdict for r in results}, indent=2))
    else:  # one line per PR: each comment is a file, not a page of raw markdown here
        for r in results:
            console.print(escape(f"PR #{r.pr} {r.name}: {r.outcome.verdict['headline']}, "
                                 f"comment in {out / r.name / 'comment.md'}"))
        console.print(_summary([(f"#{r.pr} {r.name}", r.outcome.verdict) for r in results]))
        console.print(escape(f"outputs in {out}/  ·  {time.monotonic() - started:.0f} s"))
    wrong = [r.name for r in results if not r.as_expected]
    if wrong:
        raise EvalbotError(f"demo verdicts not as expected for {', '.join(wrong)} "
                           f"(expected {EXPECTED})")


@cli.command("eval")
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="evaluate on a box of this config (its sandbox, profile, policy, clone, "
              "and the noise floors `evalbot calibrate` stored for the box)")
@click.option("--box", "box_name", default=None, help="with --config: which box (default: the "
              "only one)")
@click.option("--repo", "repo_path", default=None, help="the engine repository (path or URL); "
              "required without --config")
@click.option("--base", "base_sha", required=True, help="full SHA of main")
@click.option("--head", "head_sha", required=True, help="full SHA of the PR head")
@click.option("--profile", "profile_name", default="demo", show_default=True)
@click.option("--policy", "policy_name", default=None,
              help="default: the config's policy, else `default`")
@click.option("--models-dir", default="", help="where the profile's model files are")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path(".evalbot-box"),
              show_default=True, help="job directories and caches of the local box")
@click.option("--seed", type=int, default=None)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--dry-run", is_flag=True, help="write comment and labels to --out, publish nothing")
@click.option("--json", "as_json", is_flag=True, help="print the verdict JSON")
def eval_(config_file: Path | None, box_name: str | None, repo_path: str | None,
          base_sha: str, head_sha: str, profile_name: str, policy_name: str | None, models_dir: str,
          workdir: Path, seed: int | None, out: Path, dry_run: bool, as_json: bool) -> None:
    """Evaluate one head against one base on the local box (or a configured box)."""
    from evalbot.audit.signing import KEY_ENV, load_signing_key
    from evalbot.cli_console import output_console
    from evalbot.config.redact import for_boxes
    from evalbot.config.resources import LABELS_FILE
    from evalbot.config.settings import BoxConfig
    from evalbot.evaluation.evaluate import evaluate
    from evalbot.evaluation.profile import load_profile
    from evalbot.evaluation.progress import evaluation_bar
    from evalbot.grading.policy import load_labels
    from evalbot.service.calibrate import config_box
    from evalbot.service.pool import open_box
    from evalbot.store.jobs import Store

    if not dry_run:
        raise EvalbotError("publishing needs `evalbot serve` and a config; use --dry-run here")
    calibration = None
    if config_file is not None:
        from evalbot.config.settings import load_config

        config = load_config(config_file)
        box_config = config_box(config.boxes, box_name, "eval")
        profile_name, labels_file = config.profile, config.labels_file
        policy_name = policy_name or config.policy
        repo_path = repo_path or box_config.repo
        calibration = config.store if config.store.is_file() else None  # calibrate's floors
    elif not repo_path:
        raise EvalbotError("eval needs --repo (the engine repository), or --config FILE")
    else:
        box_config = BoxConfig(name="local", kind="local", workdir=str(workdir.resolve()),
                               repo=repo_path, models_dir=models_dir, trusted=True,
                               python=sys.executable)
        labels_file = LABELS_FILE
    profile = load_profile(profile_name)
    policy = load_labels(labels_file).policy(policy_name or "default")
    console = output_console(stderr=True)
    # Sign when the operator has named a key (the same variable the service falls back to).
    signer = load_signing_key() if os.environ.get(KEY_ENV) else None
    with evaluation_bar(console, f"{head_sha[:10]} vs {base_sha[:10]}") as progress:
        box = open_box(box_config)
        try:
            outcome = evaluate(box, box_config, profile, policy, repo=repo_path, pr=None,
                               base_sha=base_sha, head_sha=head_sha, out=out,
                               store=Store(out / "evalbot.sqlite3"),
                               redact=for_boxes([box_config]), seed=seed, progress=progress,
                               signer=signer, calibration=calibration)
        finally:
            box.close()
    if as_json:
        click.echo(json.dumps(outcome.verdict, indent=2, sort_keys=True))
    else:
        console.print(_summary([(head_sha[:10], outcome.verdict)]))
        console.print(f"comment, labels and verdict written to {out}/")


@cli.command("grade")
@click.argument("results_file", type=click.Path(path_type=Path))
@click.option("--policy", "policy_name", default="default", show_default=True)
def grade_(results_file: Path, policy_name: str) -> None:
    """Print the verdict JSON for a results file (pure: reads the file, nothing else), as
    evalbot publishes it: a run's private/results.json gives its verdict.json again."""
    from evalbot.config.resources import LABELS_FILE
    from evalbot.engine.contract.checks import ContractError
    from evalbot.engine.contract.results import load as load_results
    from evalbot.grading.policy import load_labels
    from evalbot.report.publication import graded

    try:
        results = load_results(results_file)
    except ContractError as exc:
        raise EvalbotError(str(exc)) from exc
    verdict = graded(results, load_labels(LABELS_FILE).policy(policy_name))
    click.echo(json.dumps(verdict, indent=2, sort_keys=True))


@cli.command()
@click.option("--store", "store_file", type=click.Path(path_type=Path), default=None,
              help="the SQLite store (default: the one the config names)")
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="the config: its store and its boxes")
@click.option("--last", default=10, show_default=True, help="how many recent verdicts")
@click.option("--json", "as_json", is_flag=True)
def status(store_file: Path | None, config_file: Path | None, last: int, as_json: bool) -> None:
    """Show the queue, the boxes and the last verdicts."""
    from evalbot.cli_console import output_console
    from evalbot.config.settings import load_config
    from evalbot.service.status import render_status, snapshot
    from evalbot.store.jobs import Store

    config = load_config(config_file) if config_file else None
    if store_file is None:
        if config is None:
            raise EvalbotError("status needs --config (its store) or --store FILE")
        store_file = config.store
    if not store_file.is_file():
        raise EvalbotError(f"{store_file}: no such store")
    snap = snapshot(Store(store_file), config.boxes if config else (), last)
    if as_json:
        click.echo(json.dumps(snap, indent=2, sort_keys=True))
    else:
        output_console().print(*render_status(snap))


def _summary(rows: list[tuple[str, dict[str, Any]]]) -> Table:
    from rich.table import Table

    from evalbot.grading.grade import ctx_name

    table = Table(title="evalbot verdicts")
    for col in ("PR", "verdict", "kind", "best cell [interval]", "correctness", "labels"):
        table.add_column(col, overflow="fold")
    for name, v in rows:
        best = next((c for c in v["cells"] if c["key"] == v["best_cell"]), None)
        best_text = (f"{best['metric']}@{ctx_name(best['ctx'])} {100 * best['speedup']:+.1f}% "
                     f"[{100 * best['lo']:+.1f}, {100 * best['hi']:+.1f}]") if best else "-"
        table.add_row(name, v["headline"], v["kind"], best_text, v["correctness"]["decision"],
                      " ".join(v["labels"]))
    return table


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except EvalbotError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except Exception:  # an evalbot bug: keep the traceback, say where it is
        import tempfile
        import traceback

        with tempfile.NamedTemporaryFile("w", prefix="evalbot-crash-", suffix=".log",
                                         delete=False) as log:
            traceback.print_exc(file=log)
        click.echo(f"unexpected error; traceback in {log.name}", err=True)
        sys.exit(3)
