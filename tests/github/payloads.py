"""Webhook payloads derived from GitHub's published examples (npm @octokit/webhooks-examples).

The examples lack what evalbot cares about (fork PRs, comments on PRs), so each scenario patches
an example and re-validates it against GitHub's official webhook schema (@octokit/openapi-webhooks)
before a test may use it.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from openapi_schema_validator import OAS31Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.github.openapi import DATA

URI = "urn:github-webhooks"


@functools.lru_cache(maxsize=1)
def _examples() -> dict[str, list[dict[str, Any]]]:
    doc = json.loads((DATA / "webhook-examples.json").read_text())
    return {e["name"]: e["examples"] for e in doc}


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    spec = json.loads((DATA / "webhooks-api.github.com.json").read_text())
    return Registry().with_resource(URI, DRAFT202012.create_resource(spec))


def schema_errors(event: str, action: str, payload: dict[str, Any]) -> list[str]:
    name = f"webhook-{event.replace('_', '-')}-{action.replace('_', '-')}"
    validator = OAS31Validator({"$ref": f"{URI}#/components/schemas/{name}"},
                               registry=_registry())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:120]}"
            for e in validator.iter_errors(payload)]


def example(event: str, action: str | None, index: int = 0) -> dict[str, Any]:
    found = [e for e in _examples()[event] if e.get("action") == action]
    return copy.deepcopy(found[index])


def validated(event: str, action: str, payload: dict[str, Any]) -> dict[str, Any]:
    errors = schema_errors(event, action, payload)
    if errors:
        raise AssertionError(f"derived {event}.{action} payload fails GitHub's schema: {errors}")
    return payload


def pull_request(action: str, *, number: int, head_sha: str, base_sha: str = "b" * 40,
                 author: str = "Codertocat", sender: str | None = None, fork: bool = False,
                 labels: tuple[str, ...] = (), draft: bool = False,
                 label: str | None = None) -> dict[str, Any]:
    p = example("pull_request", action)
    pr = p["pull_request"]
    pr.setdefault("auto_merge", None)  # required by the newer schema, absent in older examples
    for side in ("head", "base"):  # the newer schema requires it; the 2024 examples predate it
        pr[side]["repo"].setdefault("has_discussions", False)
    p["number"] = pr["number"] = number
    pr["head"]["sha"], pr["base"]["sha"] = head_sha, base_sha
    if action == "synchronize":
        p["after"] = head_sha
    pr["user"]["login"] = author
    pr["draft"] = draft
    p["sender"]["login"] = sender or author
    template = pr["labels"][0] if pr["labels"] else _label_template()
    pr["labels"] = [{**template, "name": name} for name in labels]
    if label is not None:
        p["label"] = {**template, "name": label}
    if fork:  # the head lives in the author's own copy of the repository
        pr["head"]["repo"]["full_name"] = f"{author}/Hello-World"
        pr["head"]["repo"]["fork"] = True
        pr["head"]["repo"]["owner"]["login"] = author
        pr["head"]["label"] = f"{author}:patch-1"
    return validated("pull_request", action, p)


def pr_comment(*, number: int, body: str, author: str, pr_author: str = "Codertocat",
               comment_id: int = 5001) -> dict[str, Any]:
    p = example("issue_comment", "created", index=1)  # index 0 fails the official schema
    p["issue"]["number"] = number
    p["issue"]["user"]["login"] = pr_author
    base = f"https://api.github.com/repos/{p['repository']['full_name']}"
    p["issue"]["pull_request"] = {"url": f"{base}/pulls/{number}",
                                  "html_url": f"https://github.com/x/pull/{number}",
                                  "diff_url": f"https://github.com/x/pull/{number}.diff",
                                  "patch_url": f"https://github.com/x/pull/{number}.patch",
                                  "merged_at": None}
    p["comment"].update({"id": comment_id, "body": body})
    p["comment"]["user"]["login"] = author
    p["sender"]["login"] = author
    return validated("issue_comment", "created", p)


def _label_template() -> dict[str, Any]:
    for e in _examples()["pull_request"]:
        if e["pull_request"]["labels"]:
            return copy.deepcopy(e["pull_request"]["labels"][0])
    raise AssertionError("no example carries a label")
