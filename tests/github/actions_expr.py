"""The part of GitHub Actions' expression language the workflow uses, evaluated the way GitHub
documents it (docs.github.com, "Evaluate expressions in workflows and actions"): `==` / `!=`
compare strings case-insensitively, a missing property is null, null / false / 0 / '' are
falsy, `&&` and `||` return an operand. Enough to test what the workflow's `if` and
`concurrency` do for a given event."""

from __future__ import annotations

import json
import re
from typing import Any

TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!().,])"
                   r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    tokens = _tokens(expression)
    value, rest = _or(tokens, context)
    if rest:
        raise ValueError(f"unparsed: {rest}")
    return value


def interpolate(text: str, context: dict[str, Any]) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _string(evaluate(m.group(1), context)), text)


def condition(value: Any, context: dict[str, Any]) -> bool:
    """A job's `if` (bare expression, or wrapped in ${{ }}) or a boolean setting."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    whole = re.fullmatch(r"\$\{\{(.*)\}\}", text, flags=re.S)
    return _truthy(evaluate(whole.group(1) if whole else text, context))


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"bad expression at {text[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _or(t: list[tuple[str, str]], c: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    left, t = _and(t, c)
    while t and t[0] == ("op", "||"):
        right, t = _and(t[1:], c)
        left = left if _truthy(left) else right
    return left, t


def _and(t: list[tuple[str, str]], c: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    left, t = _not(t, c)
    while t and t[0] == ("op", "&&"):
        right, t = _not(t[1:], c)
        left = right if _truthy(left) else left
    return left, t


def _not(t: list[tuple[str, str]], c: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    if t and t[0] == ("op", "!"):
        value, t = _not(t[1:], c)
        return not _truthy(value), t
    left, t = _primary(t, c)
    if t and t[0][1] in ("==", "!="):
        op = t[0][1]
        right, t = _primary(t[1:], c)
        return (_equal(left, right) == (op == "==")), t
    return left, t


def _primary(t: list[tuple[str, str]], c: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    kind, text = t[0]
    if text == "(":
        value, t = _or(t[1:], c)
        return value, t[1:]  # the closing parenthesis
    if kind == "str":
        return text[1:-1].replace("''", "'"), t[1:]
    if kind == "num":
        return float(text), t[1:]
    if text in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text], t[1:]
    if len(t) > 1 and t[1][1] == "(":
        args, t = [], t[2:]
        while t[0][1] != ")":
            value, t = _or(t, c)
            args.append(value)
            t = t[1:] if t[0][1] == "," else t
        return _call(text, args), t[1:]
    value: Any = c.get(text)
    t = t[1:]
    while t and t[0][1] == ".":
        value = value.get(t[1][1]) if isinstance(value, dict) else None
        t = t[2:]
    return value, t


def _call(name: str, args: list[Any]) -> Any:
    if name == "startsWith":
        return _string(args[0]).lower().startswith(_string(args[1]).lower())
    if name == "contains":
        if isinstance(args[0], list):
            return any(_equal(x, args[1]) for x in args[0])
        return _string(args[1]).lower() in _string(args[0]).lower()
    if name == "fromJSON":
        return json.loads(args[0])
    raise ValueError(f"function {name} is not modelled")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return bool(a == b)


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and value == value  # NaN is falsy


def _string(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
