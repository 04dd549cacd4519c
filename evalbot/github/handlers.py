"""Routing typed events to store actions: create, supersede or cancel jobs; run commands.

Runs in the dispatcher (never inside the webhook request), because admission asks GitHub for
the author's permission. Returns one line saying what it did, for the log and the tests.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from evalbot.config.settings import GitHubConfig
from evalbot.github import admission, pending, texts
from evalbot.github.commands import Command, ParseError, Verb, parse
from evalbot.github.events import CommentEvent, Event, PullRequestEvent
from evalbot.github.port import WRITE_PERMISSIONS, GitHubPort, PullInfo
from evalbot.github.publish import PublisherProtocol, is_ours
from evalbot.github.writing import Busy, PrLocks, dispatcher, writing
from evalbot.grading.overrides import DEFAULT_FACTOR, WAIVABLE, with_note
from evalbot.store.approvals import Approvals
from evalbot.store.jobs import ACTIVE, Store
from evalbot.store.overrides import Overrides

log = logging.getLogger("evalbot.github")
REFUSAL_EVERY_S = 3600.0  # at most one refusal per user and PR per hour
HELP_EVERY_S = 600.0  # at most one help reply per PR per 10 minutes
PERMISSION_CACHE_S = 600.0
ANNOUNCED = float("inf")  # a job's pending state is announced once, ever
EVALUATE = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})
OVERRIDES = frozenset({Verb.HOLD, Verb.UNHOLD, Verb.WAIVE, Verb.MEASURE_MORE})  # maintainers only


@dataclass(frozen=True)
class Target:
    """What one admission decision is about, from an event or from a fresh PR read."""

    number: int
    head_sha: str
    base_sha: str
    author: str
    draft: bool
    labels: tuple[str, ...]


class Handlers:
    def __init__(self, config: GitHubConfig, store: Store, port: GitHubPort,
                 publisher: PublisherProtocol, policy: str, locks: PrLocks | None = None) -> None:
        self.config, self.store, self.port = config, store, port
        self.locks = locks or PrLocks()  # shared with the reconcile's handlers (own thread)
        self.publisher, self.policy = publisher, policy
        self.quotas = admission.Quotas(config.quota_per_author_per_day,
                                       config.quota_per_pr_per_day)
        self.overrides = Overrides(store.path)
        self.approvals = Approvals(store)
        self.measure_factor = DEFAULT_FACTOR
        self._permissions: dict[str, tuple[bool, float]] = {}  # login -> (can write, when)

    def handle(self, event: Event) -> str:
        if event.repo != self.config.repo:
            return f"ignored: {event.repo} is not {self.config.repo}"
        with self.locks.hold(event.number):
            if isinstance(event, PullRequestEvent):
                return self._pull_request(event)
            return self._comment(event)

    # ---- pull_request ----------------------------------------------------------------------
    def _pull_request(self, ev: PullRequestEvent, current: PullInfo | None = None) -> str:
        with writing(self.store, ev.repo, ev.number, dispatcher()):  # Busy: the delivery waits
            return self._pr_event(ev, current)

    def _pr_event(self, ev: PullRequestEvent, current: PullInfo | None) -> str:
        if ev.action == "closed":
            return f"cancelled {self.store.cancel(ev.repo, ev.number, 'closed')} job(s)"
        target = Target(ev.number, ev.head_sha, ev.base_sha, ev.author, ev.draft, ev.labels)
        late = ""
        if current is not None or self._other_heads(ev):
            # Events arrive late and out of order: where another head of the PR has a job,
            # what counts is the PR as GitHub has it now, so an older push never supersedes
            # the current head (`current`: a fresh listing). One read, only then.
            pull = current or self.publisher.backoff.call(lambda: self.port.pull(ev.number))
            if pull.state != "open":
                return f"ignored: #{ev.number} is {pull.state}"
            target = _target(pull)
            if pull.head_sha != ev.head_sha:
                late = f" (a late event for {ev.head_sha[:10]})"
        if ev.action == "labeled":
            if ev.label != self.config.approval_label:
                return f"ignored: label {ev.label}"
            if not self.can_write(ev.sender, current=True):  # an approval spends box time
                return self._refuse_approval(ev)
            self.approvals.record(ev.repo, ev.number, ev.head_sha, ev.sender)
        if target.draft and not self.config.evaluate_drafts:
            return "waiting: draft" + late
        return self.admit(target) + late

    def _other_heads(self, ev: PullRequestEvent) -> bool:
        """Another head of the PR has a job this event could wrongly supersede or follow (a
        cancelled or superseded one decides nothing)."""
        return any(j.head_sha != ev.head_sha and j.state not in ("cancelled", "superseded")
                   for j in self.store.pr_jobs(ev.repo, ev.number))

    def admit(self, t: Target, attempt: int = 1, maintainer_rerun: bool = False) -> str:
        """Admission, then a job (superseding older heads) and the pending comment and status."""
        same = [j for j in self.store.pr_jobs(self.config.repo, t.number)
                if (j.head_sha, j.policy) == (t.head_sha, self.policy)]
        latest = max(same, key=lambda j: j.attempt) if same else None
        if latest is not None and attempt <= latest.attempt:  # a repeated event (poll, reopen)
            if latest.state in ACTIVE:  # finish an admission a crash or 5xx interrupted
                self._superseded(t)
                self._announce(latest.id, t, latest.attempt)
                return f"already queued: job {latest.id}"
            if not _again(latest.state, latest.reason):  # the verdict (or a cancel) stands
                return f"already {latest.state}: job {latest.id}"
            attempt = latest.attempt + 1  # closed and reopened, or pushed back to this head
        if self.overrides.is_held(self.config.repo, t.number):
            self.publisher.status(t.head_sha, "pending", "held by a maintainer")
            return "held: no evaluation until /evalbot unhold"
        if not maintainer_rerun:
            since = time.time() - admission.DAY_S
            facts = admission.Facts(
                author_can_write=self.can_write(t.author),
                approved=self._approved(t),
                author_today=self.store.admissions_since(self.config.repo, since, author=t.author),
                pr_today=self.store.admissions_since(self.config.repo, since, pr=t.number))
            decision = admission.decide(facts, self.quotas, self.config.approval_label)
            if not decision.admit:
                unapproved = not (facts.author_can_write or facts.approved)
                reason = (unapproved and self._stale_approval(t)) or decision.reason
                self.publisher.status(t.head_sha, "pending", reason)
                return f"waiting: {reason}"
        job = self.store.enqueue(self.config.repo, t.number, t.head_sha, self.policy,
                                 base_sha=t.base_sha, attempt=attempt)
        self.store.record_admission(job.id, self.config.repo, t.number, t.author)
        self._superseded(t)
        self._announce(job.id, t, attempt)
        return f"queued job {job.id} for {t.head_sha[:10]} (attempt {job.attempt})"

    def _superseded(self, t: Target) -> None:
        """Each older head whose job this head superseded says so in its commit status, once,
        instead of staying "pending" for ever (noted after the write: a retry completes it)."""
        for j in self.store.pr_jobs(self.config.repo, t.number):
            key = f"superseded:{j.id}"
            if j.state != "superseded" or j.head_sha == t.head_sha \
                    or self.store.noted_within(key, ANNOUNCED):
                continue
            self.publisher.status(j.head_sha, "error", f"{j.reason or 'superseded'}: not "
                                                       "evaluated, a newer push replaced it")
            self.store.note_once(key, ANNOUNCED)

    def _announce(self, job_id: str, t: Target, attempt: int) -> None:
        """The pending comment, label and status of a queued job, once: noted only after all
        three reached GitHub, so a delivery retried after a crash or a 5xx completes them."""
        key = f"announced:{job_id}"
        if self.store.noted_within(key, ANNOUNCED):
            return
        note = pending.queued_note(self.store, job_id, attempt)  # its place and an estimate
        body = texts.pending_comment(t.head_sha, "queued", note, self.config.status_context)
        self.publisher.publish(t.number, t.head_sha, body, ["eval:pending"], "pending",
                               f"queued: {t.head_sha[:10]}")
        self.store.note_once(key, ANNOUNCED)

    def poll(self) -> list[str]:
        """The webhook's job creation from a listing of open PRs (every page)."""
        pulls = self.publisher.backoff.call(self.port.open_pulls)
        return [f"#{p.number}: " + self.reconcile(p) for p in pulls]

    def reconcile(self, pull: PullInfo) -> str:
        """One open PR of a listing, handled as its push would be: a head the store knows costs
        no GitHub call; an unknown one is admitted (evalbot.github.reconcile)."""
        with self.locks.hold(pull.number):
            try:
                return self._pull_request(_as_event(pull, self.config.repo), pull)
            except Busy as exc:  # a worker publishing: its webhook, or the next pass, admits it
                return f"busy: {exc}"

    def rerun_sha(self, sha: str, who: str) -> str:
        """`evalbot rerun SHA`: the open PR whose head is SHA, rerun as a maintainer."""
        if len(sha) < 7:
            raise ValueError(f"{sha!r} is too short: give at least 7 hex digits of the head SHA")
        pulls = [p for p in self.publisher.backoff.call(self.port.open_pulls)
                 if p.head_sha.startswith(sha.lower())]
        if len(pulls) != 1:
            raise ValueError(f"{len(pulls)} open PRs have head {sha} (need exactly one)")
        return f"#{pulls[0].number}: " + self._rerun(pulls[0], who, can_write=True)

    def can_write(self, login: str, current: bool = False) -> bool:
        """The collaborator permission endpoint; author_association misses private members.
        Cached per user for 10 minutes: a flood of commands from someone without write access
        costs one look-up, not one each. A grant is trusted from the cache only where nothing
        changes (help, the refusal's wording): `current` (a command or label that changes state)
        asks GitHub again, so write access revoked a minute ago commands nothing."""
        cached = self._permissions.get(login)
        if cached is not None and time.monotonic() - cached[1] < PERMISSION_CACHE_S \
                and not (current and cached[0]):
            return cached[0]
        allowed = self.publisher.backoff.call(lambda: self.port.permission(login)) \
            in WRITE_PERMISSIONS
        self._permissions[login] = (allowed, time.monotonic())
        return allowed

    # ---- approval (evalbot/store/approvals.py) --------------------------------------------
    def _approved(self, t: Target) -> bool:
        return self.config.approval_label in t.labels and self.approvals.covers(
            self.config.repo, t.number, t.head_sha, self.config.approve_later_pushes)

    def _refuse_approval(self, ev: PullRequestEvent) -> str:
        """An approval label from someone without write access is taken off again, with a reply,
        so the PR does not look approved to anyone."""
        label = self.config.approval_label
        self.publisher.unlabel(ev.number, label)
        self.publisher.reply(ev.number, texts.approval_refused(ev.sender, label),
                             key=f"approval {ev.head_sha} {ev.sender}")
        return f"approval refused: {ev.sender} has no write access; {label} removed"

    def _stale_approval(self, t: Target) -> str:
        """The label is on, but approved an earlier head: take it off, so that a maintainer can
        apply it again for this one. '' when that is not the case."""
        label = self.config.approval_label
        if label not in t.labels or not self.approvals.of(self.config.repo, t.number):
            return ""
        self.publisher.unlabel(t.number, label)
        return f"waiting for a maintainer to apply the {label} label again: the approval " \
               f"was for an earlier head, not {t.head_sha[:10]}"

    # ---- issue_comment ---------------------------------------------------------------------
    def _comment(self, ev: CommentEvent) -> str:
        if ev.author == self.config.bot_login:
            return "ignored: own comment"
        parsed = parse(ev.body)
        if parsed is None:
            return "no command"
        with writing(self.store, ev.repo, ev.number, dispatcher()):  # Busy: the delivery waits
            return self._command(ev, parsed)

    def _command(self, ev: CommentEvent, parsed: Command | ParseError) -> str:
        # Every verb but help changes state: it needs write access as GitHub has it now.
        can_write = self.can_write(ev.author, current=isinstance(parsed, Command)
                                   and parsed.verb is not Verb.HELP)
        if not (can_write or (self.config.author_may_command and ev.author == ev.pr_author)):
            note = f"refusal:{ev.repo}#{ev.number}:{ev.author}"
            if self.store.noted_within(note, REFUSAL_EVERY_S):
                log.info("command on #%s from %s: refused within the hour; no reply",
                         ev.number, ev.author)
                self.store.count("surplus_commands:refusal")
                return f"refused {ev.author} (already told)"
            # Noted only once posted: a retried delivery still tells them (the key keeps it one).
            self.publisher.reply(ev.number, texts.refusal(ev.author,
                                                          self.config.author_may_command),
                                 key=_key(ev))
            self.store.note_once(note, REFUSAL_EVERY_S)
            return f"refused {ev.author}"
        if not isinstance(parsed, Command):
            self.publisher.reply(ev.number, f"@{ev.author} {parsed.sentence()}", key=_key(ev))
            return f"parse error: {type(parsed).__name__}"
        return self._run(parsed, ev, can_write)

    def _run(self, command: Command, ev: CommentEvent, can_write: bool) -> str:
        if command.verb is Verb.HELP:
            note = f"help:{ev.repo}#{ev.number}"
            if self.store.noted_within(note, HELP_EVERY_S):  # a flood gets no reply each
                log.info("help on #%s from %s: answered within 10 minutes; no reply",
                         ev.number, ev.author)
                self.store.count("surplus_commands:help")
                return "help (already answered)"
            self.publisher.reply(ev.number, texts.help_comment(self.config.approval_label),
                                 key=_key(ev))
            self.store.note_once(note, HELP_EVERY_S)  # after posting: a retry still answers
            return "help"
        if command.verb in OVERRIDES and not can_write:
            self.publisher.reply(ev.number, f"@{ev.author} `/evalbot {command.verb.value}` is "
                                            "for users with write access.", key=_key(ev))
            return f"override refused: {ev.author}"
        pull = self.publisher.backoff.call(lambda: self.port.pull(ev.number))
        if command.verb in OVERRIDES:
            return self._override(command, pull, ev.author, _key(ev))
        if command.verb is Verb.CANCEL:
            return self._cancel(pull, ev.author)
        return self._rerun(pull, ev.author, can_write, _key(ev))

    def _cancel(self, pull: PullInfo, who: str) -> str:
        n = self.store.cancel(self.config.repo, pull.number)
        if n:
            body = texts.pending_comment(pull.head_sha, "cancelled",
                                         f"Cancelled by @{who}; `/evalbot rerun` queues it again.",
                                         self.config.status_context)
            self.publisher.publish(pull.number, pull.head_sha, body, [], "error",
                                   f"cancelled by {who}")
        return f"cancelled {n} job(s)"

    def _rerun(self, pull: PullInfo, who: str, can_write: bool, key: str = "") -> str:
        same = [j for j in self.store.pr_jobs(self.config.repo, pull.number)
                if j.head_sha == pull.head_sha and j.policy == self.policy]
        if any(j.state in ACTIVE for j in same):
            return "rerun: already queued"
        evaluated = any(j.state in ("done", "failed") for j in same)
        if not admission.rerun_allowed(can_write, evaluated):
            self.publisher.reply(pull.number, f"@{who} this head was already evaluated; "
                                              "reruns of an unchanged head are for maintainers.",
                                 key=key or f"rerun {pull.head_sha} {who}")
            return "rerun refused: unchanged head"
        attempt = max((j.attempt for j in same), default=0) + 1
        target = Target(pull.number, pull.head_sha, pull.base_sha, pull.author, pull.draft,
                        pull.labels)
        return self.admit(target, attempt=attempt, maintainer_rerun=can_write)


    # ---- maintainer overrides (evalbot/store/overrides.py keeps the audit trail) ----------------
    def _override(self, command: Command, pull: PullInfo, who: str, key: str) -> str:
        if command.verb is Verb.HOLD:
            self.overrides.record(self.config.repo, pull.number, pull.head_sha, "hold", who)
            n = self.store.cancel(self.config.repo, pull.number)
            self._annotate(pull, "held")
            self.publisher.status(pull.head_sha, "pending", f"held by {who}")
            return f"held by {who}; cancelled {n} job(s)"
        if command.verb is Verb.UNHOLD:
            self.overrides.record(self.config.repo, pull.number, pull.head_sha, "unhold", who)
            self._annotate(pull, "queued")
            same = [j for j in self.store.pr_jobs(self.config.repo, pull.number)
                    if j.head_sha == pull.head_sha and j.policy == self.policy]
            if any(j.state == "done" for j in same):
                return "unheld: this head is evaluated already"
            attempt = max((j.attempt for j in same), default=0) + 1  # the hold cancelled one
            return "unheld: " + self.admit(_target(pull), attempt=attempt, maintainer_rerun=True)
        if command.verb is Verb.WAIVE:
            return self._waive(pull, who, command.argument, key)
        return self._measure_more(pull, who, key)

    def _waive(self, pull: PullInfo, who: str, reason: str, key: str) -> str:
        latest = [h for h in self.store.history(self.config.repo, pull.number, pull.head_sha)
                  if h["head_sha"] == pull.head_sha]
        kind = latest[0]["verdict"]["kind"] if latest else None
        if kind not in WAIVABLE:
            what = f"its verdict is {kind}" if kind else "it has no verdict yet"
            self.publisher.reply(pull.number, f"@{who} nothing to waive on `{pull.head_sha[:10]}`:"
                                              f" {what} (waivers are for failed gates).",
                                 key=key)
            return f"waive refused: {kind or 'no verdict'}"
        self.overrides.record(self.config.repo, pull.number, pull.head_sha, "waive", who,
                              reason=reason)
        self._annotate(pull, "waived")
        headline = latest[0]["verdict"]["headline"]
        self.publisher.status(pull.head_sha, "success", f"{headline} waived by {who}")
        return f"waived {kind} of {pull.head_sha[:10]} by {who}"

    def _measure_more(self, pull: PullInfo, who: str, key: str) -> str:
        same = [j for j in self.store.pr_jobs(self.config.repo, pull.number)
                if j.head_sha == pull.head_sha and j.policy == self.policy]
        if any(j.state in ACTIVE for j in same):
            return "measure-more: already queued"
        done = [j for j in same if j.state == "done"]
        if not done:
            self.publisher.reply(pull.number, f"@{who} `{pull.head_sha[:10]}` has no finished "
                                              "evaluation to measure more of yet.", key=key)
            return "measure-more refused: nothing measured"
        attempt = max(j.attempt for j in same) + 1
        line = self.admit(_target(pull), attempt=attempt, maintainer_rerun=True)
        new = [j for j in self.store.pr_jobs(self.config.repo, pull.number)
               if j.head_sha == pull.head_sha and j.attempt == attempt and j.state in ACTIVE]
        if not new:
            return f"measure-more: {line}"
        self.overrides.record(self.config.repo, pull.number, pull.head_sha, "measure-more", who,
                              job_id=new[0].id, earlier_job=done[-1].id,
                              factor=self.measure_factor)
        self._annotate(pull, "queued")
        return f"measure-more: {line}, pooling with job {done[-1].id}"

    def _annotate(self, pull: PullInfo, state: str) -> None:
        """Rewrite the overrides section of the sticky comment; the verdict above it stays."""
        comments = self.publisher.backoff.call(lambda: self.port.comments(pull.number))
        ours = sorted((c for c in comments if is_ours(c, self.config.bot_login)),
                      key=lambda c: c.id)
        body = ours[0].body if ours else texts.pending_comment(
            pull.head_sha, state, f"State: {state}.", self.config.status_context)
        trail = self.overrides.trail(self.config.repo, pull.number)
        self.publisher.sticky(pull.number, with_note(body, trail))


def _key(ev: CommentEvent) -> str:
    """A reply's idempotency key: the comment it answers (ids are unique in a repository)."""
    return f"comment {ev.comment_id}"


def _again(state: str, reason: str) -> bool:
    """Whether a head whose latest job ended this way is queued again by a repeated event:
    after its PR was closed (now reopened) or after a push it came back to; not after a
    verdict or a maintainer's cancel."""
    return state == "superseded" or (state == "cancelled" and reason == "closed")


def _target(p: PullInfo) -> Target:
    return Target(p.number, p.head_sha, p.base_sha, p.author, p.draft, p.labels)


def _as_event(p: PullInfo, repo: str) -> PullRequestEvent:
    return PullRequestEvent(action="synchronize", repo=repo, number=p.number, head_sha=p.head_sha,
                            base_sha=p.base_sha, author=p.author, sender=p.author, draft=p.draft,
                            fork=p.fork, labels=p.labels, label=None)
