"""A stateful fake GitHub REST server on loopback, checked against GitHub's OpenAPI description.

PyGithub talks to it over real HTTP under /api/v3 (the GHES layout). Its state (comments,
labels, statuses, pull requests, permissions) is what tests assert on. Every request must be a
documented operation this fake implements; every request body and every response it sends is
validated against the official description; anything else is recorded in `violations`.
Faults can be injected per operation, including a 502 sent *after* the write was committed; a
hook can act before a request is handled (a person deleting the comment the bot is editing, a
push arriving, the bot's process killed); a token can be revoked (401 on every request) and
restored. `timeline` keeps what each PR showed after every write, for assertions on the order.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from werkzeug.serving import BaseWSGIServer, make_server
from werkzeug.wrappers import Request, Response

from tests.github.openapi import Operation, RestSpec, rest_spec

REPO = "Codertocat/Hello-World"  # the repository of GitHub's published webhook examples
PREFIX = "/api/v3"
LEGACY_PERMISSION = {"triage": "read", "maintain": "write"}
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log lines in test output


@dataclass
class Fault:
    op_id: str
    status: int
    after_commit: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "Server Error"
    times: int = 1
    where: str = ""  # only requests whose path contains this (one PR: "/issues/6/")
    delay_s: float = 0.0  # status 0: a slow answer, sent delay_s after the write was committed


@dataclass
class Hook:
    """Runs before a matching request is handled, outside the fake's lock, so the bot's other
    requests go on while it waits (for a push to be admitted, for a process to die). Given the
    request's JSON body; answers None to handle the request, or a status to answer instead
    with nothing stored."""

    op_id: str
    run: Callable[[Any], int | None]
    where: str = ""  # only requests whose path contains this
    match: Callable[[Any], bool] = lambda _body: True
    times: int = 1


View = tuple[tuple[str, ...], tuple[str, ...]]  # a PR's comment bodies and labels


@dataclass
class Pull:
    number: int
    head_sha: str
    base_sha: str
    author: str
    draft: bool = False
    state: str = "open"
    fork: bool = False
    merged_sha: str | None = None  # set by a merge: GET answers merged: true and this commit


@dataclass
class State:
    tokens: dict[str, str] = field(default_factory=dict)  # token -> login
    permissions: dict[str, str] = field(default_factory=dict)  # login -> admin|write|read|none
    pulls: dict[int, Pull] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)  # id -> issue, author, body
    repo_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    issue_labels: dict[int, list[str]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # name -> head sha
    commit_dates: dict[str, str] = field(default_factory=dict)  # sha -> ISO committer date
    blocked: dict[int, str] = field(default_factory=dict)  # PR -> why branch protection refuses
    merges: list[dict[str, Any]] = field(default_factory=list)  # every merge request body
    runs: dict[int, dict[str, str]] = field(default_factory=dict)  # Actions workflow runs by id


class FakeGitHub:
    def __init__(self, spec: RestSpec | None = None) -> None:
        self.spec = spec or rest_spec()
        self.state = State()
        self.faults: list[Fault] = []
        self.hooks: list[Hook] = []
        self.revoked: set[str] = set()  # tokens GitHub no longer takes: 401
        self.timeline: list[tuple[str, dict[int, View]]] = []  # after each write: every PR
        self.log: list[tuple[str, str, int]] = []  # (method, operationId, status)
        self.violations: list[str] = []
        # When each request arrived, on `clock` (a test may give it a virtual clock):
        # (time, operationId or path, status).
        self.clock: Callable[[], float] = time.monotonic
        self.stamps: list[tuple[float, str, int]] = []
        self._ids = itertools.count(1001)
        # Called with a run's id when it is cancelled (a test's runner signals its step).
        self.on_cancel: list[Callable[[int], None]] = []
        self._lock = threading.Lock()
        self._server: BaseWSGIServer = make_server("127.0.0.1", 0, self._wsgi, threaded=True)
        self.base = f"http://127.0.0.1:{self._server.server_port}"
        self.api_url = self.base + PREFIX
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- test-side helpers -------------------------------------------------------------------
    def add_user(self, login: str, permission: str, token: str | None = None) -> None:
        self.state.permissions[login] = permission
        if token:
            self.state.tokens[token] = login

    def add_pull(self, pull: Pull, labels: list[str] = ()) -> None:  # type: ignore[assignment]
        self.state.pulls[pull.number] = pull
        self.state.issue_labels[pull.number] = list(labels)
        for name in labels:
            self.state.repo_labels.setdefault(name, {"color": "ededed", "description": ""})

    def add_run(self, workflow: str, status: str = "in_progress") -> int:
        """An Actions workflow run of `.github/workflows/<workflow>`; its id."""
        run_id = next(self._ids)
        self.state.runs[run_id] = {"path": f".github/workflows/{workflow}", "status": status,
                                   "conclusion": ""}
        return run_id

    def run_url(self, run_id: int) -> str:
        return f"https://github.com/{REPO}/actions/runs/{run_id}"

    def inject(self, fault: Fault) -> None:
        self.faults.append(fault)

    def before(self, hook: Hook) -> None:
        self.hooks.append(hook)

    def revoke(self, token: str | None = None) -> None:
        """GitHub stops taking the token (every token: an installation revoked, a key rotated):
        every request with it answers 401 "Bad credentials" until restore()."""
        self.revoked |= {token} if token else set(self.state.tokens)

    def restore(self) -> None:
        self.revoked.clear()

    def view(self, number: int) -> View:
        return (tuple(str(c["body"]) for c in self.comments_on(number)),
                tuple(self.state.issue_labels.get(number, [])))

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.state.comments.values() if c["issue"] == number]

    def labels_on(self, number: int) -> set[str]:
        return set(self.state.issue_labels.get(number, []))

    def calls(self, op_id: str) -> int:
        return sum(1 for _m, op, _s in self.log if op == op_id)

    # ---- HTTP ----------------------------------------------------------------------------------
    def _wsgi(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        hooked = self._hook(request)  # outside the lock: a hook may wait on the bot's requests
        with self._lock:  # GitHub serialises writes per repository closely enough for tests
            at, logged = self.clock(), len(self.log)
            response = self._handle(request) if hooked is None else self._hooked(request, hooked)
            what = self.log[logged][1] if len(self.log) > logged else request.path
            self.stamps.append((at, what, response.status_code))
            if request.method != "GET" and response.status_code < 300:
                self.timeline.append((what, {n: self.view(n) for n in self.state.pulls}))
        return response(environ, start_response)

    def _hook(self, request: Request) -> int | None:
        path = request.path[len(PREFIX):] if request.path.startswith(PREFIX) else ""
        op = self.spec.operation(request.method, path)
        body = request.get_json(silent=True) if request.data else None
        with self._lock:
            hook = next((h for h in self.hooks if op is not None and h.op_id == op.op_id
                         and h.times > 0 and h.where in request.path and h.match(body)), None)
            if hook is not None:
                hook.times -= 1
        return None if hook is None else hook.run(body)

    def _hooked(self, request: Request, status: int) -> Response:
        op = self.spec.operation(request.method, request.path[len(PREFIX):])
        assert op is not None
        return self._fault_response(op, Fault(op.op_id, status, message="answered by a hook"))

    def _handle(self, request: Request) -> Response:
        path = request.path
        op = self.spec.operation(request.method, path[len(PREFIX):]) \
            if path.startswith(PREFIX) else None
        if op is None:
            self.violations.append(f"undocumented request {request.method} {path}")
            return self._json(404, {"message": "Not Found"})
        bearer = request.headers.get("Authorization", "").split(" ")[-1]
        login = None if bearer in self.revoked else self.state.tokens.get(bearer)
        if login is None:
            return self._reply(op, 401, {"message": "Bad credentials",
                                         "documentation_url": "https://docs.github.com/rest"})
        body = request.get_json(silent=True) if request.data else None
        if request.data and body is None:
            self.violations.append(f"{op.op_id}: request body is not JSON")
        self.violations.extend(self.spec.check_request(op, body))
        handler = getattr(self, "_op_" + op.op_id.replace("/", "_").replace("-", "_"), None)
        if handler is None:
            self.violations.append(f"fake does not implement {op.op_id} ({request.method} {path})")
            return self._json(404, {"message": "Not Found"})
        fault = self._fault(op.op_id, path)
        if fault is not None and not fault.after_commit:
            return self._fault_response(op, fault)
        params = dict(zip(_names(op.template), path[len(PREFIX):].split("/"), strict=False))
        params = {k.strip("{}"): v for k, v in params.items() if k.startswith("{")}
        status, payload, headers = handler(login, params, body, request.args)
        if fault is not None and fault.status == 0:
            time.sleep(fault.delay_s)  # GitHub stored it; the answer is late (a client timeout)
        elif fault is not None:
            return self._fault_response(op, fault)
        return self._reply(op, status, payload, headers)

    def _fault(self, op_id: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.op_id == op_id and fault.times > 0 and fault.where in path:
                fault.times -= 1
                return fault
        return None

    def _fault_response(self, op: Operation, fault: Fault) -> Response:
        self.log.append((op.method, op.op_id, fault.status))
        resp = self._json(fault.status, {"message": fault.message,
                                         "documentation_url": "https://docs.github.com/rest"})
        resp.headers.update(fault.headers)
        return resp

    def _reply(self, op: Operation, status: int, payload: Any,
               headers: dict[str, str] | None = None) -> Response:
        text = json.dumps(payload).replace("https://api.github.com", self.api_url) \
            if payload is not None else ""
        self.violations.extend(self.spec.check_response(
            op, status, json.loads(text) if text else None))
        self.log.append((op.method, op.op_id, status))
        resp = Response(text, status=status, content_type="application/json")
        for key, value in (headers or {}).items():
            resp.headers[key] = value.replace("https://api.github.com", self.api_url)
        return resp

    @staticmethod
    def _json(status: int, payload: Any) -> Response:
        return Response(json.dumps(payload), status=status, content_type="application/json")

    # ---- operations (named after operationId) -------------------------------------------------
    def _op_repos_get_collaborator_permission_level(self, login: str, p: dict[str, str],
                                                    body: Any, args: Any) -> Any:
        user = p["username"]
        if user not in self.state.permissions:
            return 404, _not_found(), None
        doc = self.spec.example(
            "repository-collaborator-permission-response-if-user-has-admin-permissions")
        perm = self.state.permissions[user]
        # GitHub's `permission` is the legacy level: triage shows as read, maintain as write;
        # `role_name` carries the role.
        doc["permission"] = LEGACY_PERMISSION.get(perm, perm)
        doc["role_name"] = perm
        doc["user"]["login"] = user
        doc["user"]["role_name"] = perm  # the example lacks this required field
        return 200, doc, None

    def _op_pulls_get(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        pull = self.state.pulls.get(int(p["pull_number"]))
        return (404, _not_found(), None) if pull is None else (200, self._pull_doc(pull), None)

    def _op_pulls_list(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        want = args.get("state", "open")
        pulls = [x for x in sorted(self.state.pulls.values(), key=lambda x: x.number)
                 if want == "all" or x.state == want]
        status, page, headers = self._page(pulls, args, f"/repos/{REPO}/pulls", {"state": want})
        return status, [self._pull_doc(x, simple=True) for x in page], headers  # the page's only

    def _op_issues_list_comments(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        number = int(p["issue_number"])
        docs = [self._comment_doc(cid) for cid, c in sorted(self.state.comments.items())
                if c["issue"] == number]
        return self._page(docs, args, f"/repos/{REPO}/issues/{number}/comments", {})

    def _op_issues_create_comment(self, login: str, p: dict[str, str], body: Any,
                                  args: Any) -> Any:
        cid = next(self._ids)
        self.state.comments[cid] = {"issue": int(p["issue_number"]), "author": login,
                                    "body": body["body"]}
        return 201, self._comment_doc(cid), None

    def _op_issues_get_comment(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        cid = int(p["comment_id"])
        return (200, self._comment_doc(cid), None) if cid in self.state.comments \
            else (404, _not_found(), None)

    def _op_issues_update_comment(self, login: str, p: dict[str, str], body: Any,
                                  args: Any) -> Any:
        comment = self.state.comments.get(int(p["comment_id"]))
        if comment is None:  # deleted (by a person, say) since the bot listed it
            return 404, _not_found(), None
        if comment["author"] != login:
            # GitHub lets only the author (or a maintainer) edit; the bot must only edit its own.
            self.violations.append(f"edit of comment {p['comment_id']} not written by {login}")
            return 422, _validation("IssueComment"), None
        comment["body"] = body["body"]
        return 200, self._comment_doc(int(p["comment_id"])), None

    def _op_issues_delete_comment(self, login: str, p: dict[str, str], body: Any,
                                  args: Any) -> Any:
        comment = self.state.comments.get(int(p["comment_id"]))
        if comment is None:
            return 404, _not_found(), None
        if comment["author"] != login:
            self.violations.append(f"delete of comment {p['comment_id']} not written by {login}")
        else:
            del self.state.comments[int(p["comment_id"])]
        return 204, None, None

    def _op_issues_list_labels_on_issue(self, login: str, p: dict[str, str], body: Any,
                                        args: Any) -> Any:
        number = int(p["issue_number"])
        docs = [self._label_doc(n) for n in self.state.issue_labels.get(number, [])]
        return self._page(docs, args, f"/repos/{REPO}/issues/{number}/labels", {})

    def _op_issues_add_labels(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        names = body if isinstance(body, list) else body["labels"]
        current = self.state.issue_labels.setdefault(int(p["issue_number"]), [])
        for name in names:
            if name not in self.state.repo_labels:
                # GitHub creates an unknown label grey; evalbot must create its labels first.
                self.violations.append(f"label {name!r} added before it was created")
                self.state.repo_labels[name] = {"color": "ededed", "description": ""}
            if name not in current:
                current.append(name)
        return 200, [self._label_doc(n) for n in current], None

    def _op_issues_remove_label(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        current = self.state.issue_labels.setdefault(int(p["issue_number"]), [])
        if p["name"] not in current:
            return 404, {"message": "Label does not exist",
                         "documentation_url": "https://docs.github.com/rest"}, None
        current.remove(p["name"])
        return 200, [self._label_doc(n) for n in current], None

    def _op_issues_list_labels_for_repo(self, login: str, p: dict[str, str], body: Any,
                                        args: Any) -> Any:
        docs = [self._label_doc(n) for n in sorted(self.state.repo_labels)]
        return self._page(docs, args, f"/repos/{REPO}/labels", {})

    def _op_issues_create_label(self, login: str, p: dict[str, str], body: Any,
                                args: Any) -> Any:
        if body["name"] in self.state.repo_labels:
            return 422, _validation("Label", "already_exists"), None
        self.state.repo_labels[body["name"]] = {"color": body.get("color", "ededed"),
                                                "description": body.get("description") or ""}
        return 201, self._label_doc(body["name"]), None

    def _op_issues_get_label(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        return (200, self._label_doc(p["name"]), None) if p["name"] in self.state.repo_labels \
            else (404, _not_found(), None)

    def _op_issues_update_label(self, login: str, p: dict[str, str], body: Any,
                                args: Any) -> Any:
        label = self.state.repo_labels.pop(p["name"])
        label.update({k: body[k] for k in ("color", "description") if k in body})
        self.state.repo_labels[body.get("new_name", p["name"])] = label
        return 200, self._label_doc(body.get("new_name", p["name"])), None

    def _op_repos_create_commit_status(self, login: str, p: dict[str, str], body: Any,
                                       args: Any) -> Any:
        entry = {"state": body["state"], "description": body.get("description", ""),
                 "context": body.get("context", "default"), "creator": login,
                 "target_url": body.get("target_url") or ""}
        self.state.statuses.setdefault(p["sha"], []).append(entry)
        doc = self.spec.example("status")
        doc.update({"state": entry["state"], "description": entry["description"],
                    "context": entry["context"], "id": next(self._ids),
                    "target_url": entry["target_url"] or None})
        return 201, doc, None

    def _op_repos_list_commit_statuses_for_ref(self, login: str, p: dict[str, str], body: Any,
                                               args: Any) -> Any:
        docs = []
        for n, entry in reversed(list(enumerate(self.state.statuses.get(p["ref"], [])))):
            doc = self.spec.example("status")  # newest first, as GitHub lists them
            doc.update({"state": entry["state"], "description": entry["description"] or None,
                        "context": entry["context"], "id": n + 1,
                        "target_url": entry["target_url"] or None})
            docs.append(doc)
        return self._page(docs, args, f"/repos/{REPO}/commits/{p['ref']}/statuses", {})

    def _op_actions_get_workflow_run(self, login: str, p: dict[str, str], body: Any,
                                     args: Any) -> Any:
        run = self.state.runs.get(int(p["run_id"]))
        if run is None:
            return 404, _not_found(), None
        doc = self.spec.example("workflow-run")
        doc.update({"id": int(p["run_id"]), "path": run["path"], "status": run["status"],
                    "conclusion": run["conclusion"] or None})
        return 200, doc, None

    def _op_actions_cancel_workflow_run(self, login: str, p: dict[str, str], body: Any,
                                        args: Any) -> Any:
        run_id = int(p["run_id"])
        run = self.state.runs.get(run_id)
        if run is None:
            return 404, _not_found(), None
        if run["status"] == "completed":  # GitHub: "Cannot cancel a workflow run that is completed."
            return 409, {"message": "Cannot cancel a workflow run that is completed.",
                         "documentation_url": "https://docs.github.com/rest"}, None
        run.update(status="completed", conclusion="cancelled")
        for hook in self.on_cancel:
            hook(run_id)
        return 202, {}, None

    def _op_repos_get_branch(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        sha = self.state.branches.get(p["branch"])
        if sha is None:
            return 404, _not_found(), None
        doc = self.spec.example("branch-get")
        doc["name"], doc["commit"]["sha"] = p["branch"], sha
        return 200, doc, None

    def _op_repos_get_commit(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        date = self.state.commit_dates.get(p["ref"])
        if date is None:
            return 422, _validation("Commit"), None
        doc = self.spec.example("commit")
        doc["sha"] = p["ref"]
        doc["files"] = []  # the spec's example files lack the required contents_url
        doc["commit"]["committer"]["date"] = doc["commit"]["author"]["date"] = date
        return 200, doc, None

    def _op_pulls_merge(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        pull = self.state.pulls.get(int(p["pull_number"]))
        self.state.merges.append({"number": int(p["pull_number"]), **(body or {})})
        if pull is None:
            return 404, _not_found(), None
        if pull.state != "open" or pull.number in self.state.blocked:
            why = self.state.blocked.get(pull.number, "Pull Request is not mergeable")
            return 405, {"message": why, "documentation_url": "https://docs.github.com/rest"}, None
        if (body or {}).get("sha", pull.head_sha) != pull.head_sha:
            return 409, {"message": "Head branch was modified. Review and try the merge again.",
                         "documentation_url": "https://docs.github.com/rest"}, None
        pull.state = "closed"
        merged = pull.merged_sha = f"{next(self._ids):040x}"
        self.state.branches["main"] = merged
        doc = self.spec.example("pull-request-merge-result-response-if-merge-was-successful")
        doc["sha"] = merged
        return 200, doc, None

    def _op_pulls_update(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        pull = self.state.pulls.get(int(p["pull_number"]))
        if pull is None:
            return 404, _not_found(), None
        if body and body.get("state") in ("open", "closed"):
            pull.state = body["state"]
        return 200, self._pull_doc(pull), None

    # ---- documents --------------------------------------------------------------------------
    def _comment_doc(self, cid: int) -> dict[str, Any]:
        c = self.state.comments[cid]
        doc = self.spec.example("issue-comment")
        base = f"https://api.github.com/repos/{REPO}"
        doc.update({"id": cid, "node_id": f"IC_{cid}", "body": c["body"],
                    "url": f"{base}/issues/comments/{cid}",
                    "issue_url": f"{base}/issues/{c['issue']}",
                    "html_url": f"https://github.com/{REPO}/pull/{c['issue']}#issuecomment-{cid}"})
        doc["user"]["login"] = c["author"]
        doc["user"]["type"] = "Bot" if c["author"].endswith("[bot]") else "User"
        return doc

    def _label_doc(self, name: str) -> dict[str, Any]:
        label = self.state.repo_labels.get(name, {"color": "ededed", "description": ""})
        doc = self.spec.example("label")
        doc.update({"name": name, "color": label["color"],
                    "description": label["description"],
                    "url": f"https://api.github.com/repos/{REPO}/labels/{name}"})
        return doc

    def _pull_doc(self, pull: Pull, simple: bool = False) -> dict[str, Any]:
        doc = self.spec.example("pull-request-simple-items")[0] if simple \
            else self.spec.example("pull-request")
        doc["requested_teams"] = []  # the spec's own example lacks the required team `type`
        doc.update({"number": pull.number, "state": pull.state, "draft": pull.draft,
                    "url": f"https://api.github.com/repos/{REPO}/pulls/{pull.number}",
                    "labels": [self._label_doc(n) for n in
                               self.state.issue_labels.get(pull.number, [])]})
        doc["user"]["login"] = pull.author
        doc["merge_commit_sha"] = pull.merged_sha
        if not simple:
            doc["merged"] = pull.merged_sha is not None
        doc["merged_at"] = "2011-01-26T19:01:12Z" if pull.merged_sha else None
        doc["head"]["sha"], doc["base"]["sha"] = pull.head_sha, pull.base_sha
        doc["base"]["ref"] = "main"
        doc["base"]["repo"]["full_name"] = REPO
        doc["head"]["repo"]["full_name"] = f"{pull.author}/Hello-World" if pull.fork else REPO
        return doc

    def _page(self, docs: list[Any], args: Any, path: str, extra: dict[str, str]) -> Any:
        per_page = min(int(args.get("per_page", 30)), 100)
        page = int(args.get("page", 1))
        last = max(1, -(-len(docs) // per_page))
        links = []
        for rel, number in (("next", page + 1), ("last", last)):
            if page < last:
                query = urlencode({**extra, "per_page": per_page, "page": number})
                links.append(f'<https://api.github.com{path}?{query}>; rel="{rel}"')
        headers = {"Link": ", ".join(links)} if links else {}
        return 200, docs[(page - 1) * per_page: page * per_page], headers


def _names(template: str) -> list[str]:
    return template.split("/")


def _not_found() -> dict[str, str]:
    return {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}


def _validation(resource: str, code: str = "invalid") -> dict[str, Any]:
    return {"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest",
            "errors": [{"resource": resource, "code": code, "field": "body"}]}
