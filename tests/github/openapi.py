"""GitHub's official REST OpenAPI description (npm @octokit/openapi): find operations, validate.

Every request the fake GitHub receives and every response it sends is checked here; what fails is
recorded as a violation, and the test fixture fails the test on any violation.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openapi_schema_validator import OAS30Validator
from referencing import Registry
from referencing.jsonschema import DRAFT4

DATA = Path(__file__).resolve().parent.parent / ".npm"
REST = DATA / "rest-api.github.com.json"
SPEC_URI = "urn:github-rest"

# Documented deviation (github-testing.md §0.3): the spec's request schema for add/set labels
# allows only {"labels": [...]}, while its prose allows a bare array, which PyGithub sends.
BARE_ARRAY_OK = {"issues/add-labels", "issues/set-labels"}
# Answers GitHub gives on any operation, listed or not (docs.github.com, "Troubleshooting the REST
# API"): 401 "Bad credentials" for a token it does not take, 404 for a resource that does not
# exist (an edit of a comment someone deleted: the description lists only 200 and 422 there).
# Their bodies are still checked, against the description's own shared responses.
ANY_OPERATION = {401: "requires_authentication", 404: "not_found"}


@dataclass(frozen=True)
class Operation:
    op_id: str
    method: str
    template: str
    pointer: str  # JSON pointer of the operation object inside the spec


class RestSpec:
    def __init__(self, path: Path = REST) -> None:
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: run .ci/setup-github-data")
        self.doc: dict[str, Any] = json.loads(path.read_text())
        self.registry: Registry = Registry().with_resource(SPEC_URI, DRAFT4.create_resource(self.doc))
        self._routes = self._compile()

    def _compile(self) -> list[tuple[re.Pattern[str], str, dict[str, Operation]]]:
        routes = []
        for template, item in self.doc["paths"].items():
            ops = {m.upper(): Operation(op["operationId"], m.upper(), template,
                                        f"/paths/{_esc(template)}/{m}")
                   for m, op in item.items() if isinstance(op, dict) and "operationId" in op}
            regex = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")
            routes.append((regex, template, ops))
        # Literal segments win over parameters: /issues/comments/{id} before /issues/{n}/comments.
        routes.sort(key=lambda r: r[1].count("{"))
        return routes

    def operation(self, method: str, path: str) -> Operation | None:
        for regex, _template, ops in self._routes:
            if regex.match(path) and method in ops:
                return ops[method]
        return None

    def check_request(self, op: Operation, body: Any) -> list[str]:
        rb = self._deref(self._at(op.pointer).get("requestBody"))
        if rb is None or body is None:
            return [] if body is None or rb is None and body in ({}, []) else \
                [f"{op.op_id}: request has a body the spec does not describe"]
        if isinstance(body, list) and op.op_id in BARE_ARRAY_OK:
            body = {"labels": body}
        schema_ptr = f"{op.pointer}/requestBody/content/application~1json/schema"
        if "$ref" in self._at(op.pointer)["requestBody"]:
            ref = self._at(op.pointer)["requestBody"]["$ref"][1:]
            schema_ptr = f"{ref}/content/application~1json/schema"
        return [f"{op.op_id} request: {e}" for e in self._errors(schema_ptr, body)]

    def check_response(self, op: Operation, status: int, body: Any) -> list[str]:
        responses = self._at(op.pointer)["responses"]
        if str(status) not in responses and status in ANY_OPERATION:
            responses = {str(status): {"$ref": f"#/components/responses/{ANY_OPERATION[status]}"}}
        if str(status) not in responses:
            return [f"{op.op_id}: status {status} is not documented"]
        resp = responses[str(status)]
        base = resp["$ref"][1:] if "$ref" in resp else f"{op.pointer}/responses/{status}"
        content = self._at(base).get("content", {})
        if "application/json" not in content:
            return [] if body in (None, b"", "") else [f"{op.op_id} {status}: undocumented body"]
        return [f"{op.op_id} {status} response: {e}"
                for e in self._errors(f"{base}/content/application~1json/schema", body)]

    def example(self, name: str) -> Any:
        return json.loads(json.dumps(self.doc["components"]["examples"][name]["value"]))

    def schema_errors(self, component: str, instance: Any) -> list[str]:
        return self._errors(f"/components/schemas/{component}", instance)

    def _errors(self, pointer: str, instance: Any) -> list[str]:
        validator = _validator(self, pointer)
        return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:200]}"
                for e in validator.iter_errors(instance)]

    def _at(self, pointer: str) -> Any:
        node: Any = self.doc
        for part in pointer.strip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def _deref(self, node: Any) -> Any:
        return self._at(node["$ref"][1:]) if isinstance(node, dict) and "$ref" in node else node


@functools.lru_cache(maxsize=256)
def _validator(spec: RestSpec, pointer: str) -> OAS30Validator:
    return OAS30Validator({"$ref": f"{SPEC_URI}#{pointer}"}, registry=spec.registry)


def _esc(template: str) -> str:
    return template.replace("~", "~0").replace("/", "~1")


@functools.lru_cache(maxsize=1)
def rest_spec() -> RestSpec:
    return RestSpec()
