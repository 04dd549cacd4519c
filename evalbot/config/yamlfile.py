"""Load YAML keeping each key's line, so validation errors can say `file:line: key: problem`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from evalbot.config.errors import ConfigError

T = TypeVar("T")


class Doc:
    """A loaded YAML file: values plus the line of every key path (`a.b[2].c`).

    With `collect=True` every problem that does not stop the reading is kept (`fail`) and
    `finish` reports them all at once, so a user fixes a file in one round, not one per error.
    """

    def __init__(self, path: Path, collect: bool = False) -> None:
        self.path = path
        self.collect = collect
        self.problems: list[str] = []
        self.lines: dict[str, int] = {}
        try:
            node = yaml.compose(path.read_text())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = f":{mark.line + 1}" if mark is not None else ""
            what = " ".join(x for x in (exc.context, exc.problem) if x)
            raise ConfigError(f"{path}{line}: not valid YAML: {what}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc
        self.data = self._build(node, "") if node is not None else {}

    def fail(self, error: ConfigError) -> None:
        """A problem the reading can go past: kept when collecting, raised otherwise."""
        if not self.collect:
            raise error
        self.problems.append(str(error))

    def finish(self) -> None:
        if len(self.problems) == 1:
            raise ConfigError(self.problems[0])
        if self.problems:
            raise ConfigError(f"{len(self.problems)} problems:\n  " + "\n  ".join(self.problems))

    def _build(self, node: yaml.Node, where: str) -> Any:
        self.lines.setdefault(where, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key_node, value_node in node.value:
                key = key_node.value
                path = f"{where}.{key}" if where else key
                if key in out:  # PyYAML keeps the last silently; a typo'd copy must not win
                    raise ConfigError(f"{self.path}:{key_node.start_mark.line + 1}: {path}: "
                                      f"duplicate key (first at line {self.lines[path]})")
                self.lines[path] = key_node.start_mark.line + 1
                out[key] = self._build(value_node, path)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._build(v, f"{where}[{i}]") for i, v in enumerate(node.value)]
        return yaml.safe_load(yaml.serialize(node))

    def error(self, where: str, message: str) -> ConfigError:
        line = self._line(where)
        return ConfigError(f"{self.path}:{line}: {where or '<top>'}: {message}")

    def _line(self, where: str) -> int:
        while where and where not in self.lines:
            where = where.rsplit(".", 1)[0] if "." in where else ""
        return self.lines.get(where, 1)


class Section:
    """Typed, strict access to one mapping of a Doc: unknown keys are errors."""

    def __init__(self, doc: Doc, where: str, value: Any, allowed: set[str]) -> None:
        if not isinstance(value, dict):
            raise doc.error(where, f"expected a mapping, got {type(value).__name__}")
        prefix = f"{where}." if where else ""
        for key in sorted(set(value) - allowed):
            doc.fail(doc.error(f"{prefix}{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})"))
        self.doc, self.where, self.value = doc, where, value

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.value or self.value[key] is None:
            if default is ...:
                raise self.doc.error(self.path(key), "required key is missing")
            return default
        value = self.value[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        problem = None
        if isinstance(value, bool) and kind in (int, float):
            problem = self.doc.error(self.path(key), f"expected {kind}, got a boolean")
        elif not isinstance(value, kind):
            name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            problem = self.doc.error(self.path(key), f"expected {name}, got {type(value).__name__}")
        if problem is None:
            return value
        if default is ...:
            raise problem
        self.doc.fail(problem)
        return default

    def section(self, key: str, allowed: set[str]) -> Section:
        return Section(self.doc, self.path(key), self.value.get(key, {}), allowed)

    def items(self, key: str, allowed: set[str]) -> list[Section]:
        values = self.get(key, list)
        return [Section(self.doc, f"{self.path(key)}[{i}]", v, allowed) for i, v in enumerate(values)]

    def check(self, key: str, ok: Callable[[Any], bool], message: str) -> None:
        if key in self.value and not ok(self.value[key]):
            self.doc.fail(self.doc.error(self.path(key), message))
