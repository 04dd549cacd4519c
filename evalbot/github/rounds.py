"""One round over the open PRs (`evalbot rounds`, run from cron): the `merge-first` label, the
optional auto-merge of that PR after a confirmation run, the optional closing of stale PRs.
Every feature is off unless the config's `github:` section turns it on.

Only verdicts measured on the current main count, and speedups are compared only between cells
of the same metric and unit: a tok/s speedup never outranks a ms one."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from evalbot.config.settings import GitHubConfig, load_config
from evalbot.github.port import GitHubError, GitHubPort, LabelInfo, PullInfo, Transient
from evalbot.grading.policy import load_labels
from evalbot.store.jobs import Store

TIERS = ("XL", "L", "M", "S", "XS")  # best first
DAY_S = 86400.0
STALE_MARK = "<!-- evalbot:stale -->"  # found on a retry: one stale comment however many tries
STALE_TEXT = (STALE_MARK + "\nClosing this PR: no push for {days} days. Push a new commit and "
              "reopen it to get it evaluated again.")
LABEL_STYLE = LabelInfo("merge-first", "0e8a16", "evalbot: the best verified PR on current main")


@dataclass(frozen=True)
class Candidate:
    number: int
    head_sha: str
    tier: str
    metric: str
    unit: str
    speedup: float
    confirmations: int  # improved verdicts of this head on this main (2+: a confirmation ran)


def candidate(pull: PullInfo, history: list[dict[str, Any]], main_sha: str) -> Candidate | None:
    """The PR's standing on current main: its newest verdict of this head and main, if it is
    an improvement that passed correctness; None otherwise (a draft, stale, neutral, ...)."""
    if pull.draft:
        return None
    mine = [h for h in history if h["head_sha"] == pull.head_sha and h["base_sha"] == main_sha
            and not h["stale"]]
    if not mine or not _verified(mine[0]["verdict"]):  # history is newest first
        return None
    verdict = mine[0]["verdict"]
    [best] = [c for c in verdict["cells"] if c["key"] == verdict["best_cell"]]
    return Candidate(pull.number, pull.head_sha, verdict["tier"], best["metric"], best["unit"],
                     float(best["speedup"]), sum(1 for h in mine if _verified(h["verdict"])))


def _verified(verdict: dict[str, Any]) -> bool:
    return (verdict.get("kind") == "improved" and verdict.get("tier") in TIERS
            and verdict.get("best_cell") is not None
            and (verdict.get("correctness") or {}).get("decision", "pass") != "reject")


def pick(cands: list[Candidate]) -> Candidate | None:
    """The best by tier; within the best tier by the best cell's speedup, which is only compared
    when every tied PR's best cell has the same metric and unit. No clear winner: None."""
    if not cands:
        return None
    top = min(TIERS.index(c.tier) for c in cands)
    tied = [c for c in cands if TIERS.index(c.tier) == top]
    if len(tied) == 1:
        return tied[0]
    if len({(c.metric, c.unit) for c in tied}) != 1:
        return None  # different units: not comparable, so nobody is merge-first
    ranked = sorted(tied, key=lambda c: c.speedup, reverse=True)
    return ranked[0] if ranked[0].speedup > ranked[1].speedup else None


@dataclass
class Round:
    gh: GitHubConfig
    store: Store
    port: GitHubPort
    policy: str  # the policy ident jobs are queued under (confirmation runs)
    main_branch: str = "main"

    def run(self, now: float | None = None) -> list[str]:
        """One round; returns one line per action taken (or why none was)."""
        lines: list[str] = []
        pulls = [p for p in self.port.open_pulls() if p.base_ref == self.main_branch]
        if self.gh.close_stale_after_days:
            pulls = self._close_stale(pulls, time.time() if now is None else now, lines)
        if self.gh.merge_first:
            self._merge_first(pulls, lines)
        return lines or ["nothing to do (round features are off, or nothing qualifies)"]

    def _close_stale(self, pulls: list[PullInfo], now: float, lines: list[str]
                     ) -> list[PullInfo]:
        days = self.gh.close_stale_after_days
        kept = []
        for pull in pulls:
            if now - self.port.commit_date(pull.head_sha) < days * DAY_S:
                kept.append(pull)
                continue
            lines.append(self._close_one(pull.number, days))
        return kept

    def _close_one(self, number: int, days: int) -> str:
        """Say why, once (a comment of an earlier, failed try is found by its mark), then close.
        A failure is this PR's line; the next round tries again without a second comment."""
        try:
            if not any(STALE_MARK in c.body for c in self.port.comments(number)):
                self.port.create_comment(number, STALE_TEXT.format(days=days))
            self.port.close_pull(number)
        except GitHubError as exc:
            return f"#{number}: not closed: {exc}"
        return f"#{number}: closed (no push for {days} days)"

    def _merge_first(self, pulls: list[PullInfo], lines: list[str]) -> None:
        main_sha = self.port.branch_sha(self.main_branch)
        cands = [c for p in pulls if (c := candidate(
            p, self.store.history(self.gh.repo, p.number), main_sha)) is not None]
        winner = pick(cands)
        self._label(pulls, winner, lines)
        if winner is None:
            lines.append(f"merge-first: no clear winner among {len(cands)} verified PR(s)")
        elif self.gh.auto_merge:
            lines.append(self._auto_merge(winner, main_sha))

    def _label(self, pulls: list[PullInfo], winner: Candidate | None, lines: list[str]) -> None:
        name = self.gh.merge_first_label
        for pull in pulls:
            if name in pull.labels and (winner is None or pull.number != winner.number):
                self.port.remove_label(pull.number, name)
                lines.append(f"#{pull.number}: {name} removed")
        if winner is None or any(p.number == winner.number and name in p.labels for p in pulls):
            return
        if name not in {lb.name for lb in self.port.repo_labels()}:
            self.port.create_label(LabelInfo(name, LABEL_STYLE.color, LABEL_STYLE.description))
        self.port.add_labels(winner.number, [name])
        lines.append(f"#{winner.number}: {name} ({winner.tier}, {winner.metric} "
                     f"{100 * winner.speedup:+.1f}%)")

    def _auto_merge(self, winner: Candidate, main_sha: str) -> str:
        """Merge only after a second improved verdict of the same head on the same main; the SHA
        makes GitHub refuse if the head moved, and branch protection applies as to anyone."""
        if winner.confirmations < 2:
            return self._confirm(winner, main_sha)
        try:
            merged = self.port.merge(winner.number, winner.head_sha, self.gh.merge_method)
        except Transient as exc:  # GitHub may have merged it and lost the answer: ask, not retry
            try:
                done = self.port.merged(winner.number)
            except GitHubError as again:
                return f"#{winner.number}: merge unknown ({exc}; then {again}): see GitHub"
            if done is None:
                return f"#{winner.number}: not merged: {exc}"
            merged = done
        except GitHubError as exc:
            return f"#{winner.number}: not merged: {exc}"
        return f"#{winner.number}: merged {winner.head_sha[:10]} as {merged[:10]}"

    def _confirm(self, winner: Candidate, main_sha: str) -> str:
        jobs = self.store.pr_jobs(self.gh.repo, winner.number)
        if any(j.state in ("queued", "running") for j in jobs):
            return f"#{winner.number}: confirmation run pending"
        attempt = 1 + max((j.attempt for j in jobs if j.head_sha == winner.head_sha), default=0)
        job = self.store.enqueue(self.gh.repo, winner.number, winner.head_sha, self.policy,
                                 base_sha=main_sha, attempt=attempt)
        return f"#{winner.number}: confirmation run queued (job {job.id}, attempt {attempt})"


@click.command("rounds")
@click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)
def rounds_cmd(config_file: Path) -> None:
    """Run one round: merge-first label, auto-merge, stale PRs (each only if configured)."""
    from evalbot.github.service import github_config, make_port

    config = load_config(config_file)
    gh = github_config(config)
    policy = load_labels(config.labels_file).policy(config.policy, str(config.labels_file))
    store = Store(config.store)
    try:
        for line in Round(gh, store, make_port(gh, config.secret(gh.token_env)),
                          policy.ident).run():
            click.echo(line)
    finally:
        store.close()
