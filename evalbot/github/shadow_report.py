"""`evalbot shadow-report`: agreement per PR between shadow verdicts and the existing bot's labels.

Shadow mode (evalbot.github.shadow) records the verdict evalbot would have published in the
store's `shadow_log`; this compares each with the `eval:*` label the existing bot put on the PR
(read from GitHub, or from a JSON file of PR number -> labels).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from evalbot.config.errors import EvalbotError
from evalbot.grading.policy import TIER_ORDER
from evalbot.store.shadow_log import ShadowLog

HEADLINE_PREFIX = "eval:"
TIERS = frozenset(f"{HEADLINE_PREFIX}{t}" for t in TIER_ORDER)
NOT_A_VERDICT = frozenset({"eval:pending"})


@dataclass(frozen=True)
class Row:
    pr: int
    head_sha: str
    ours: str  # the headline evalbot would have published
    kind: str
    theirs: str  # the existing bot's eval:* label, "" when it has none
    agreement: str  # agree | tier differs | disagree | no label from the existing bot


def shadow_verdicts(store_path: Path) -> dict[int, tuple[str, str, str]]:
    """PR -> (head SHA, headline, kind) of the latest verdict recorded in shadow mode."""
    if not Path(store_path).is_file():
        raise EvalbotError(f"{store_path}: no such store")
    log = ShadowLog(store_path)
    try:
        return log.verdicts()
    finally:
        log.close()


def their_headline(labels: list[str] | tuple[str, ...]) -> str:
    """The existing bot's headline label among a PR's labels ('' when it set none)."""
    found = [lb for lb in labels if lb.startswith(HEADLINE_PREFIX) and ":" not in lb[5:]
             and lb not in NOT_A_VERDICT]
    return found[0] if found else ""


def compare(ours: str, theirs: str) -> str:
    if not theirs:
        return "no label from the existing bot"
    if ours == theirs:
        return "agree"
    if ours in TIERS and theirs in TIERS:
        return "tier differs"
    return "disagree"


def report(store_path: Path, their_labels: dict[int, list[str]]) -> list[Row]:
    rows = []
    for pr, (sha, ours, kind) in sorted(shadow_verdicts(store_path).items()):
        theirs = their_headline(their_labels.get(pr, []))
        rows.append(Row(pr, sha, ours, kind, theirs, compare(ours, theirs)))
    return rows


def summary(rows: list[Row]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row.agreement] = out.get(row.agreement, 0) + 1
    return out


def labels_from_file(path: Path) -> dict[int, list[str]]:
    """A JSON object {"<PR number>": ["label", ...]} (e.g. exported from the existing bot)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise EvalbotError(f"{path}: not a readable JSON labels file: {exc}") from exc
    if not isinstance(doc, dict):
        raise EvalbotError(f"{path}: expected an object of PR number -> list of labels")
    out = {}
    for key, value in doc.items():
        if not str(key).isdigit() or not isinstance(value, list):
            raise EvalbotError(f"{path}: entry {key!r}: expected a PR number and a list of labels")
        out[int(key)] = [str(v) for v in value]
    return out


def labels_from_github(config_file: Path, prs: list[int]) -> dict[int, list[str]]:
    from evalbot.config.settings import load_config
    from evalbot.github.service import github_config, make_port

    config = load_config(config_file)
    gh = github_config(config)
    port = make_port(gh, config.secret(gh.token_env))
    return {pr: port.issue_labels(pr) for pr in prs}


def render(rows: list[Row]) -> str:
    lines = [f"{'PR':>6}  {'head':<10}  {'evalbot':<18}  {'existing bot':<18}  agreement"]
    for r in rows:
        lines.append(f"{'#' + str(r.pr):>6}  {r.head_sha[:10]:<10}  {r.ours:<18}  "
                     f"{r.theirs or '-':<18}  {r.agreement}")
    counts = summary(rows)
    lines.append(f"{len(rows)} PR(s): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                 if rows else "no verdicts recorded in shadow mode yet")
    return "\n".join(lines)


@click.command("shadow-report")
@click.option("--store", "store_path", type=click.Path(path_type=Path), required=True,
              help="the bot's SQLite store (shadow mode records its verdicts there)")
@click.option("--labels-file", type=click.Path(path_type=Path), default=None,
              help='the existing bot\'s labels as JSON {"<PR>": [labels]}')
@click.option("--config", "config_file", type=click.Path(path_type=Path), default=None,
              help="read each PR's current labels from GitHub instead")
@click.option("--json", "as_json", is_flag=True)
def shadow_report(store_path: Path, labels_file: Path | None, config_file: Path | None,
                  as_json: bool) -> None:
    """Agreement per PR between evalbot's shadow verdicts and the existing bot's labels."""
    if (labels_file is None) == (config_file is None):
        raise EvalbotError("give exactly one of --labels-file and --config")
    prs = sorted(shadow_verdicts(store_path))
    theirs = labels_from_file(labels_file) if labels_file else \
        labels_from_github(config_file, prs)  # type: ignore[arg-type]
    rows = report(store_path, theirs)
    if as_json:
        click.echo(json.dumps({"rows": [asdict(r) for r in rows], "summary": summary(rows)},
                              indent=2, sort_keys=True))
    else:
        click.echo(render(rows))
