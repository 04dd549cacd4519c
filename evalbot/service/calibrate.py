"""`evalbot calibrate`: an A/A run (base = head) that measures a box's noise per cell.

The job is the profile's own, with base and head the same SHA and one look at a fixed pair
count, so every pair is measured (no early stop). The sd of the per-pair log-ratio of each cell
is stored in the SQLite store (table `box_noise`, kept by evalbot.store.noise) and becomes that cell's
sd floor in later jobs on the same box (`NoiseStore.floors` -> jobspec.make_job(sd_floors=...)).
An A/A that does not come out neutral everywhere is reported: the box is sick or the engine is
not deterministic in speed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

import click
import numpy as np

from evalbot.config.errors import EvalbotError
from evalbot.config.settings import BoxConfig
from evalbot.engine.contract.job import Job
from evalbot.engine.contract.shared import replay, stats
from evalbot.engine.contract.shared.witness_interval import pair_savings
from evalbot.evaluation.jobspec import WITNESS_FLOOR, make_job
from evalbot.evaluation.profile import Profile
from evalbot.grading.confirmation import with_stops
from evalbot.grading.policy import Policy
from evalbot.grading.sequential import rule_lists, schedule
from evalbot.service.calibrate_report import progress_lines, undecidable, unruled
from evalbot.store.noise import NoiseStore

MIN_PAIRS = 6  # fewer pairs give an sd too uncertain to floor anything on


def calibration_job(profile: Profile, policy: Policy, box: BoxConfig, sha: str,
                    pairs: int, witnesses: bool = False,
                    only: Collection[str] | None = None) -> Job:
    """The profile's job with base = head and a single look after `pairs` pairs; with
    `witnesses`, every witness runs `pairs` pairs too, on its own sd, or only those named in
    `only` (the periodic A/A of evalbot.service.health measures again just the witnesses whose
    floor is stale: all of them would double some checks' box time)."""
    if pairs < MIN_PAIRS:
        raise EvalbotError(f"calibrate: {pairs} pairs is too few (at least {MIN_PAIRS})")
    job = make_job(profile, policy, box, sha, sha)
    # the first rule (no pooling) with a negligible floor: measure the noise, do not assume it
    rule = dataclasses.replace(
        job.rule, looks=[pairs], sd_floors={}, sd_floor=1e-6, tier_edges={}, calibrated=[],
        **rule_lists(schedule([pairs], profile.cell_count, policy.alpha)),
        budget_s=max(job.rule.budget_s, 1.0) * 4, witness_aa=witnesses,
        max_budget_s=None if job.rule.max_budget_s is None else job.rule.max_budget_s * 4)
    # Without `witnesses` none runs: a profile that witnesses every cell that did not regress
    # (the demo's witness_every_cell) would otherwise run them all in an A/A, whose cells never
    # regress, spending half the calibration's box time on floors nobody asked for.
    # Its one look measures every pair: no run measures on for its wall clock (cost_critical
    # is per look of the profile's rule, which this job replaces).
    runs = [dataclasses.replace(r, cost_critical=[], witnesses=[with_stops(dataclasses.replace(
        w, pairs=pairs, looks=(pairs,), sd_floor_s=0.0, floor_df=0), policy.alpha)
        for w in r.witnesses if witnesses and (only is None or w.name in only)])
        for r in job.runs]
    return dataclasses.replace(job, rule=rule, runs=runs, job_id=f"aa-{job.job_id}")


def aa_noise(results: dict[str, Any]) -> dict[str, tuple[float, int]]:
    """Cell key -> (sd of the per-pair log-ratio, pairs) from an A/A results document."""
    if results["failures"]:
        first = results["failures"][0]
        raise EvalbotError(f"calibrate: the A/A run failed at {first['stage']}: "
                           f"{first['message']}")
    out = {}
    for record in results["cells"]:
        kept = [s for s in record["samples"] if not s["dropped"]]
        base = [s["value"] for s in kept if s["side"] == "base"]
        head = [s["value"] for s in kept if s["side"] == "head"]
        n = min(len(base), len(head))
        if n < 2:
            raise EvalbotError(f"calibrate: {replay.cell_key(record)} has {n} pairs")
        r = stats.log_ratios(base[:n], head[:n], record["higher_is_better"])
        sd = float(r.std(ddof=1))
        if not sd > 0:  # identical samples: a floor of 0 would make every interval a point
            raise EvalbotError(f"calibrate: {replay.cell_key(record)} measured no noise at all "
                               f"(sd 0 over {n} pairs); the engine's rates are not measurements")
        if not sd < 1:  # every job would refuse it (jobspec._floors): store none of them
            raise EvalbotError(f"calibrate: {replay.cell_key(record)} measured a noise of "
                               f"{100 * sd:.0f}% per pair (sd of ln(head/base) over {n} pairs): "
                               "the box is not steady enough to measure on; nothing stored. "
                               "Quiet the box and calibrate again")
        out[replay.cell_key(record)] = (sd, n)
    return out | witness_noise(results)


def witness_noise(results: dict[str, Any]) -> dict[str, tuple[float, int]]:
    """WITNESS_FLOOR + name -> (sd of a pair's saving in seconds, verified pairs) of every
    witness an A/A ran (`calibration_job(witnesses=True)`): the box's floor for it."""
    out = {}
    for w in results.get("witnesses") or []:
        if w.get("source") != "witness":
            continue
        d = pair_savings(w["samples"], need_verified=True)
        if len(d) < 2:
            raise EvalbotError(f"calibrate: witness {w['name']} has {len(d)} verified pairs")
        sd = float(np.std(d, ddof=1))
        if not sd > 0:
            raise EvalbotError(f"calibrate: witness {w['name']} measured no noise at all "
                               f"(sd 0 over {len(d)} pairs)")
        out[WITNESS_FLOOR + w["name"]] = (sd, len(d))
    return out


def remeasure_witnesses(store_path: Path, box: str, profile: str, sha: str,
                        results: dict[str, Any]) -> dict[str, tuple[float, int]]:
    """Store the witness floors an A/A measured (the periodic A/A's stale ones) as the box's:
    later jobs pool with them, and the stale test (evalbot.grading.witness_floor) starts
    afresh under them."""
    noise = witness_noise(results)
    if noise:
        store = NoiseStore(store_path)
        try:
            store.record(box, profile, sha, noise)
        finally:
            store.close()
    return noise


def sick_cells(results: dict[str, Any]) -> list[str]:
    """Cells whose A/A came out improved or regressed: the box (or the engine) is not steady."""
    return [replay.cell_key(c) for c in results["cells"]
            if c["looks"] and c["looks"][-1]["decision"] in ("improved", "regressed")]


@click.command("calibrate")
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="calibrate a box of this config (ssh or local): its profile, policy and store")
@click.option("--box", "--box-name", "box_name", default=None,
              help="with --config: which box (default: the only one); without: the name the "
                   "noise is stored under")
@click.option("--repo", "repo_path", default=None,
              help="the engine repository (path or URL); default with --config: the box's clone")
@click.option("--sha", required=True, help="full SHA to measure against itself (main)")
@click.option("--profile", "profile_name", default="demo", show_default=True,
              help="without --config")
@click.option("--policy", "policy_name", default="default", show_default=True,
              help="without --config")
@click.option("--pairs", type=int, default=12, show_default=True, help="A/A pairs per run")
@click.option("--models-dir", default="", help="without --config: where the model files are")
@click.option("--workdir", type=click.Path(path_type=Path), default=Path(".evalbot-box"),
              show_default=True, help="without --config: job directories of the local box")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None,
              help="the bot's SQLite store file (default with --config: the config's)")
@click.option("--out", type=click.Path(path_type=Path), default=Path("evalbot-calibrate"),
              show_default=True, help="where the A/A results.json goes")
@click.option("--witnesses/--no-witnesses", default=True, show_default=True,
              help="also run every witness --pairs pairs and store its floor")
def calibrate_cmd(config_file: Path | None, box_name: str | None, repo_path: str | None,
                  sha: str, profile_name: str, policy_name: str, pairs: int, models_dir: str,
                  workdir: Path, store_path: Path | None, out: Path, witnesses: bool) -> None:
    """A/A on a box: store each cell's noise as its sd floor, and each witness's."""
    import sys

    from evalbot.config.settings import load_config

    if config_file is not None:
        config = load_config(config_file)
        box_config = config_box(config.boxes, box_name, "calibrate")
        profile_name, policy_name = config.profile, config.policy
        store_path = store_path or config.store
        labels_file = config.labels_file
    else:
        from evalbot.config.resources import LABELS_FILE

        if not repo_path or store_path is None:
            raise EvalbotError("calibrate needs --config FILE (a configured box), or --repo and "
                               "--store for the local box")
        box_config = BoxConfig(name=box_name or "local", kind="local",
                               workdir=str(workdir.resolve()), repo=repo_path,
                               models_dir=models_dir, trusted=True, python=sys.executable)
        labels_file = LABELS_FILE
    if repo_path:
        box_config = dataclasses.replace(box_config, repo=repo_path)
    _calibrate(box_config, profile_name, policy_name, labels_file, sha, pairs, store_path, out,
               witnesses)


def config_box(boxes: tuple[BoxConfig, ...], name: str | None, command: str) -> BoxConfig:
    """The box `--box` names (or the config's only one), for `command`'s error."""
    if name is None and len(boxes) == 1:
        return boxes[0]
    for box in boxes:
        if box.name == name:
            return box
    raise EvalbotError(f"{command}: name the box with --box (one of "
                       f"{', '.join(b.name for b in boxes)})")


def _calibrate(box_config: BoxConfig, profile_name: str, policy_name: str, labels_file: Path,
               sha: str, pairs: int, store_path: Path, out: Path, witnesses: bool) -> None:
    from evalbot.evaluation import pipeline
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels
    from evalbot.service.pool import open_box

    profile = load_profile(profile_name)
    policy = load_labels(labels_file).policy(policy_name)
    job = calibration_job(profile, policy, box_config, sha, pairs, witnesses)
    out.mkdir(parents=True, exist_ok=True)
    click.echo(f"calibrate: an A/A run of {sha[:10]} on box {box_config.name!r}, {pairs} pairs "
               f"per run{' and per witness' if witnesses else ''} (minutes)", err=True)
    box = open_box(box_config)
    try:
        results = pipeline.evaluate(box, box_config, job, out, progress=progress_lines(
            lambda line: click.echo(line, err=True), pairs))
    finally:
        box.close()
    noise = aa_noise(results)
    store = NoiseStore(store_path)
    try:
        store.record(box_config.name, profile.name, sha, noise)
        # what a PR's job on the box gets: this run's floors and any stored before (witnesses)
        stored = store.floors(box_config.name, profile.name)
        degrees = store.degrees(box_config.name, profile.name)
    finally:
        store.close()
    for key, (sd, n) in noise.items():
        if key.startswith(WITNESS_FLOOR):
            click.echo(f"{key:<32} sd of a pair's saving {sd:.4f} s  over {n} pairs")
            continue
        click.echo(f"{key:<32} sd of ln(head/base) {100 * sd:6.3f}%  over {n} pairs  "
                   f"(per run about {100 * sd / math.sqrt(2):.3f}%)")
    for cell in undecidable(noise, profile, policy, box_config, sha):
        click.echo(cell.warning(policy), err=True)
    for line in unruled(stored, degrees, results, profile, policy, box_config, sha).lines():
        click.echo(line, err=True)
    sick = sick_cells(results)
    if sick:
        raise EvalbotError(f"A/A not neutral in {', '.join(sick)}: the box is not steady")
    click.echo(f"stored {len(noise)} floors (cells and witnesses) for box "
               f"{box_config.name!r}, profile {profile.name!r}")
