"""Tiny structural validation for the JSON contracts, with errors that name the field."""

from __future__ import annotations

from typing import Any


class ContractError(ValueError):
    """A JSON document does not match its contract; the message names the field."""


def field(obj: Any, path: str, key: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    """Return obj[key] after checking its type; `path` locates obj in the document."""
    if not isinstance(obj, dict):
        raise ContractError(f"{path or '<root>'}: expected an object, got {type(obj).__name__}")
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise ContractError(f"{path}.{key}: missing")
    value = obj[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and kind in (int, float):
        raise ContractError(f"{path}.{key}: expected {kind.__name__}, got bool")
    if not isinstance(value, kind):
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ContractError(f"{path}.{key}: expected {want}, got {type(value).__name__}")
    return value


def one_of(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ContractError(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return value


def sha(value: str, where: str) -> str:
    """Full 40-hex commit ids only: never branch names, never abbreviations."""
    if len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
        raise ContractError(f"{where}: {value!r} is not a full 40-hex commit SHA")
    return value
