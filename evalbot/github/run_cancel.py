"""`/evalbot cancel` on a GitHub-hosted runner: cancel the workflow run evaluating the PR.

With one self-hosted runner, a comment's own job would wait behind the evaluation it should
stop. So the workflow's `cancel` job runs this on `ubuntu-latest` (no box, no store, no config):

    python3 -m evalbot.github.run_cancel --event EVENT.json --repo OWNER/NAME --api-url URL

with the job's token in EVALBOT_GITHUB_TOKEN (`actions: write`). It reads the comment event,
checks that the commenter may cancel (write access, or the PR's author unless
`--writers-only`: evalbot's own rule, evalbot.github.handlers), finds the run evaluating the PR
through the PR head's pending `evalbot` commit status (the worker links it to its run when it
starts the job: `evalbot worker --run-url`), checks that the run is one of the evaluation
workflow's and still going, and cancels it (POST /repos/{o}/{r}/actions/runs/{id}/cancel).
GitHub then signals the worker (evalbot.service.run_cancelled), which records the cancel,
stops the run on the box and says so on the PR. Everything else about the comment (a queued
job, the reply) is the `intake` job's, as for any command.

Standard library only: the hosted runner runs it from the wheel file, with nothing installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from evalbot.github.commands import Command, Verb, parse

TOKEN_ENV = "EVALBOT_GITHUB_TOKEN"
WRITE = ("admin", "maintain", "write")  # evalbot.github.port.WRITE_PERMISSIONS
GOING = ("queued", "in_progress", "waiting", "pending", "requested")
RUN_URL = re.compile(r"/actions/runs/(\d+)(?:/|$)")


class CancelError(Exception):
    """The request could not be carried out (GitHub refused or failed): exit 1, said why."""


@dataclass(frozen=True)
class Request:
    pr: int
    commenter: str
    pr_author: str


class GitHub:
    """The four REST calls, over urllib."""

    def __init__(self, api_url: str, repo: str, token: str) -> None:
        self.base, self.token = f"{api_url.rstrip('/')}/repos/{repo}", token

    def call(self, method: str, path: str) -> tuple[int, Any]:
        req = urllib.request.Request(self.base + path, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "evalbot-run-cancel"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                body = resp.read()
                return resp.status, json.loads(body) if body else None
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise CancelError(f"{method} {path}: GitHub unreachable: {exc}") from exc

    def get(self, path: str) -> Any:
        status, doc = self.call("GET", path)
        if status != 200:
            raise CancelError(f"GET {path}: HTTP {status}")
        return doc


def request_of(event: dict[str, Any]) -> Request | None:
    """The cancel a comment event asks for; None when it is not `/evalbot cancel` on a PR."""
    issue, comment = event.get("issue") or {}, event.get("comment") or {}
    if event.get("action") != "created" or not issue.get("pull_request"):
        return None
    if parse(str(comment.get("body") or "")) != Command(Verb.CANCEL):
        return None
    return Request(int(issue["number"]), str(comment["user"]["login"]),
                   str(issue["user"]["login"]))


def may_cancel(gh: GitHub, req: Request, writers_only: bool) -> bool:
    if req.commenter == req.pr_author and not writers_only:
        return True
    status, doc = gh.call("GET", f"/collaborators/{req.commenter}/permission")
    if status == 404:  # not a collaborator
        return False
    if status != 200:
        raise CancelError(f"the permission of {req.commenter}: HTTP {status}")
    return str(doc.get("permission")) in WRITE or str(doc.get("role_name")) in WRITE


def evaluating_run(gh: GitHub, pr: int, context: str) -> int | None:
    """The run the PR head's latest `context` status links to, when that status is pending."""
    head = gh.get(f"/pulls/{pr}")["head"]["sha"]
    statuses = gh.get(f"/commits/{head}/statuses?per_page=100")  # newest first
    latest = next((s for s in statuses if s.get("context") == context), None)
    if latest is None or latest.get("state") != "pending":
        return None
    found = RUN_URL.search(str(latest.get("target_url") or ""))
    return int(found[1]) if found else None


def cancel(gh: GitHub, req: Request, workflow: str, context: str, writers_only: bool) -> str:
    """What was done, in one line."""
    if not may_cancel(gh, req, writers_only):
        return f"refused: {req.commenter} may not cancel PR #{req.pr}'s evaluation"
    run_id = evaluating_run(gh, req.pr, context)
    if run_id is None:
        return f"PR #{req.pr}: no evaluation running (a queued one is the intake's to cancel)"
    run = gh.get(f"/actions/runs/{run_id}")
    if not str(run.get("path", "")).endswith(f".github/workflows/{workflow}"):
        return f"PR #{req.pr}: run {run_id} is not one of {workflow}'s; not cancelled"
    if run.get("status") not in GOING:
        return f"PR #{req.pr}: run {run_id} already {run.get('conclusion') or run.get('status')}"
    status, _ = gh.call("POST", f"/actions/runs/{run_id}/cancel")
    if status != 202:
        raise CancelError(f"cancelling run {run_id}: HTTP {status}")
    return f"PR #{req.pr}: cancelled run {run_id} for {req.commenter}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m evalbot.github.run_cancel",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--event", required=True, help="the issue_comment event file")
    ap.add_argument("--repo", required=True, help="OWNER/NAME")
    ap.add_argument("--api-url", default="https://api.github.com")
    ap.add_argument("--workflow", default="evalbot.yml", help="the evaluation workflow's file")
    ap.add_argument("--context", default="evalbot", help="the config's status_context")
    ap.add_argument("--writers-only", action="store_true",
                    help="the config sets author_may_command: false")
    args = ap.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        print(f"run_cancel: {TOKEN_ENV} is not set", file=sys.stderr)
        return 2
    with open(args.event, encoding="utf-8") as f:
        req = request_of(json.load(f))
    if req is None:
        print("run_cancel: not an `/evalbot cancel` comment on a PR; nothing to do")
        return 0
    try:
        print("run_cancel: " + cancel(GitHub(args.api_url, args.repo, token), req,
                                      args.workflow, args.context, args.writers_only))
    except CancelError as exc:
        print(f"run_cancel: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
