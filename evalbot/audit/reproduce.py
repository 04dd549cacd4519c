"""`evalbot reproduce VERDICT.json`: the commands that repeat a verdict's measurement elsewhere.

Everything printed comes from the verdict's provenance (commits, profile, policy, seed, harness
version, models by sha256). The verdict file may come from anyone, so every value that reaches a
command line is validated (SHAs are 40 hex digits) and shell-quoted.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import click

from evalbot.audit.signing import KEYS_DIR, SignatureError, load_public_keys, verify_verdict
from evalbot.audit.signing_cli import read_verdict
from evalbot.config.errors import EvalbotError
from evalbot.config.resources import LABELS_FILE
from evalbot.engine import __version__ as HARNESS_VERSION
from evalbot.grading.policy import load_labels

_SHA = re.compile(r"^[0-9a-f]{40}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
_POLICY = re.compile(r"^([A-Za-z0-9_.-]+)@(\d+)$")


def reproduction(verdict: Any, repo: str | None = None, signature_note: str = "") -> str:
    """The shell script (as text) that repeats the measurement behind `verdict`."""
    prov = _provenance(verdict)
    base, head = _sha(prov, "base_sha"), _sha(prov, "head_sha")
    policy_name, policy_version = _policy(prov)
    profile = _word(prov, "profile")
    seed = prov.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise EvalbotError(f"verdict provenance: seed {seed!r} is not an integer")
    harness = str(prov.get("harness_version") or "unknown")
    out = f"reproduce-{head[:10]}"
    q = shlex.quote
    repo_arg = q(repo) if repo else '"$ENGINE_REPO"'
    lines = [
        "#!/usr/bin/env bash",
        f"# Reproduce {verdict.get('headline', '?')} ({verdict.get('kind', '?')}), "
        f"job {prov.get('job_id', '?')}",
        *([f"# {signature_note}"] if signature_note else []),
        f"# measured by harness {harness}; this evalbot ships harness {HARNESS_VERSION}"
        + ("" if harness == HARNESS_VERSION else " -- install the measuring version first:"),
        *([f"#   pip install 'evalbot=={q(harness)}'  (or check out that release of evalbot)"]
          if harness != HARNESS_VERSION else []),
        f"# original box: {_box_text(prov.get('box'))}",
        f"# policy {policy_name} version {policy_version}{_policy_note(policy_name, policy_version)}"
        f"; profile {profile}; correctness seed "
        f"{seed if seed is not None else 'none (not scored)'}; "
        f"corpus {prov.get('corpus_version') or '-'}",
        "set -eu",
        *([] if repo else ['ENGINE_REPO="${ENGINE_REPO:?set ENGINE_REPO to the engine '
                           'repository (path or clone URL)}"']),
        'MODELS_DIR="${MODELS_DIR:?set MODELS_DIR to the directory of the model files}"',
        "",
        "# 1. the exact commits (never branch names)",
        f"git -C {repo_arg} cat-file -e {base}^{{commit}} || git -C {repo_arg} fetch origin {base}",
        f"git -C {repo_arg} cat-file -e {head}^{{commit}} || git -C {repo_arg} fetch origin {head}",
        *_merge_base_lines(prov),
        "",
        "# 2. the same model files, by sha256",
        *_model_lines(prov.get("models")),
        "",
        "# 3. measure base and head on this box, then re-grade from the recorded samples",
        " ".join([
            "evalbot eval", "--repo", repo_arg, "--base", base, "--head", head,
            "--profile", q(profile), "--policy", q(policy_name), "--models-dir", '"$MODELS_DIR"',
            *(["--seed", str(seed)] if seed is not None else []), "--out", out, "--dry-run",
        ]),
        # the raw results (every sample): report/publication.py keeps them under private/
        f"evalbot grade {out}/private/results.json --policy {q(policy_name)}",
        "",
        f"# original stopping rule: {_rule_text(prov.get('rule'))}",
        "# the other box's own calibrated noise sets its sd floor, so its pair counts may differ;",
        "# compare the decisions and intervals, not the raw tok/s of two different boxes.",
    ]
    # One element, one line: a control character planted in a verdict field cannot end a
    # comment line early and smuggle a command into the script.
    return "\n".join(_CONTROL.sub(" ", line) for line in lines) + "\n"


def _policy_note(name: str, version: str) -> str:
    try:
        here = load_labels(LABELS_FILE).policy(name).version
    except EvalbotError:
        return f" (this evalbot has no policy {name!r}: grade with the measuring release)"
    return "" if str(here) == version else f" (this evalbot has version {here}: results may differ)"


def _provenance(verdict: Any) -> dict[str, Any]:
    if not isinstance(verdict, dict) or not isinstance(verdict.get("provenance"), dict):
        raise EvalbotError("not a verdict: no \"provenance\" object")
    return verdict["provenance"]


def _sha(prov: dict[str, Any], key: str) -> str:
    value = prov.get(key)
    if not isinstance(value, str) or not _SHA.match(value):
        raise EvalbotError(f"verdict provenance: {key} {value!r} is not a full 40-hex SHA")
    return value


def _policy(prov: dict[str, Any]) -> tuple[str, str]:
    match = _POLICY.match(str(prov.get("policy", "")))
    if match is None:
        raise EvalbotError(f"verdict provenance: policy {prov.get('policy')!r} is not NAME@VERSION")
    return match.group(1), match.group(2)


def _word(prov: dict[str, Any], key: str) -> str:
    value = prov.get(key)
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9_.-]+$", value):
        raise EvalbotError(f"verdict provenance: {key} {value!r} is not a plain name")
    return value


def _merge_base_lines(prov: dict[str, Any]) -> list[str]:
    merge_base = prov.get("merge_base")
    if not merge_base:
        return []
    return [f"# head was evaluated merged onto main; merge base {_sha(prov, 'merge_base')}"]


def _model_lines(models: Any) -> list[str]:
    lines = []
    for m in models if isinstance(models, list) else []:
        sha, name = str(m.get("sha256", "")), PurePosixPath(str(m.get("path", ""))).name
        if not re.match(r"^[0-9a-f]{64}$", sha) or not name:
            lines.append(f"# model {shlex.quote(str(m.get('name')))}: no usable sha256/path")
            continue
        lines.append(f"echo {shlex.quote(f'{sha}  {name}')} | "
                     f"(cd \"$MODELS_DIR\" && sha256sum -c -)   # {m.get('name')} ({m.get('role')})")
    return lines or ["# (no models recorded)"]


def _box_text(box: Any) -> str:
    if not isinstance(box, dict):
        return "unknown"
    gpu: dict[str, Any] = box["gpu_start"] if isinstance(box.get("gpu_start"), dict) else {}
    name = gpu.get("name") or "no GPU reported"
    driver = f", driver {gpu['driver_version']}" if gpu.get("driver_version") else ""
    return f"{name}{driver}, {box.get('machine', '?')}, Python {box.get('python', '?')}, " \
           f"{box.get('cpus', '?')} CPUs"


def _rule_text(rule: Any) -> str:
    if not isinstance(rule, dict):
        return "unknown"
    keys = ("looks", "sd_floor", "significance", "tolerance", "warmup", "alpha", "budget_s")
    return ", ".join(f"{k} {rule[k]}" for k in keys if k in rule)


def _signature_note(verdict: Any, keys_dir: Path) -> str:
    if not isinstance(verdict, dict) or "signature" not in verdict:
        return "not signed"
    try:
        return f"signature ok (key {verify_verdict(verdict, load_public_keys(keys_dir))})"
    except SignatureError as exc:
        return f"SIGNATURE DOES NOT VERIFY: {exc}"


@click.command()
@click.argument("verdict_file", type=click.Path(path_type=Path))
@click.option("--repo", default=None, help="the engine repository (path or clone URL)")
@click.option("--keys", "keys_dir", type=click.Path(path_type=Path), default=KEYS_DIR,
              show_default=True, help="published public keys, to check the verdict's signature")
def reproduce(verdict_file: Path, repo: str | None, keys_dir: Path) -> None:
    """Print the commands that repeat a verdict's measurement on another box."""
    verdict = read_verdict(verdict_file)
    click.echo(reproduction(verdict, repo, _signature_note(verdict, keys_dir)), nl=False)
