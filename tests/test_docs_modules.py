"""docs/architecture.md names every module of evalbot/, engine/ and remote/ and nothing that is
gone, and its error tree names every subclass of EvalbotError (issue 54, item 5).

A newcomer finds a module by its package's row on that page; a module the page leaves out, or a
name it keeps after the module went, sends them looking in the wrong place. Everything is read
from the files, nothing imported, so the test costs milliseconds: the modules from the tree on
disk, the error classes from the `class` lines of the sources.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
TOPS = ("evalbot", "engine", "remote")
NOT_MODULES = ("__init__.py", "__main__.py")
BASE_ERROR = "EvalbotError"
CLASS_LINE = re.compile(r"^\s*class\s+(\w+)\s*\(([^)]*)\)\s*:", re.MULTILINE)


def python_files(root: Path = ROOT) -> set[str]:
    """Every .py file under the three trees, as a path from the root ("evalbot/github/port.py").
    The links evalbot/engine and evalbot/remote are not followed: they are engine/ and remote/."""
    found: set[str] = set()
    for top in TOPS:
        for folder, dirs, files in os.walk(root / top):  # followlinks=False: links stay out
            dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
            rel = Path(folder).relative_to(root)
            found.update((rel / f).as_posix() for f in files if f.endswith(".py"))
    return found


def modules_on_disk(root: Path = ROOT) -> set[str]:
    """The modules the page must name: every .py file but a package's __init__ and __main__."""
    return {p for p in python_files(root) if p.rsplit("/", 1)[-1] not in NOT_MODULES}


def _top_level_code(cell: str) -> list[str]:
    """The `code` spans of a table cell outside parentheses: the module names. What a
    parenthesis says about a module (`evalbot calibrate`, `COMMANDS`) is not a name."""
    names, depth, i = [], 0, 0
    while i < len(cell):
        if cell[i] == "`":
            end = cell.index("`", i + 1)
            if depth == 0:
                names.append(cell[i + 1:end])
            i = end + 1
            continue
        depth += {"(": 1, ")": -1}.get(cell[i], 0)
        i += 1
    return names


def named_on_page(text: str) -> dict[str, str]:
    """path from the root -> the row that names it, for every entry of the "Packages" tables:
    under "### TOP/", a row `| `PKG/` | what | `name`, `name` (...) |` (PKG `(top)`: TOP itself).
    A bare name is a .py module; one with a dot or a slash (`score.py`, `topk.cpp`, `template/`)
    is a file or folder of the package, named as it is."""
    section = ("\n" + text).split("\n## Packages", 1)[1].split("\n## ", 1)[0]
    top, named = "", {}
    for line in section.splitlines():
        if line.startswith("### "):
            top = line[4:].split("/", 1)[0].strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3:
            continue
        package = cells[0]
        if package == "(top)":
            folder = top
        elif re.fullmatch(r"`[\w/]+/`", package):
            folder = f"{top}/{package.strip('`').rstrip('/')}"
        else:
            continue  # the header and the rule under it
        for name in _top_level_code(cells[-1]):
            path = f"{folder}/{name}" if "." in name or "/" in name else f"{folder}/{name}.py"
            named[path.rstrip("/")] = line
    return named


def problems(root: Path, text: str) -> list[str]:
    on_disk = modules_on_disk(root)
    named = named_on_page(text)
    missing = [f"{m}: not in docs/architecture.md's tables" for m in sorted(on_disk)
               if m not in named]
    gone = [f"{p}: named by docs/architecture.md but not in the tree" for p in sorted(named)
            if not (root / p).exists()]
    return missing + gone


def test_the_page_names_every_module_and_only_modules_that_exist() -> None:
    assert problems(ROOT, PAGE.read_text()) == []


def test_a_module_left_out_and_a_module_gone_are_both_named(tmp_path: Path) -> None:
    """The check itself, on a tree of two packages: it must see both faults, and not be fooled
    by a name inside a parenthesis or by the link evalbot/engine."""
    for path in ("evalbot/store/jobs.py", "evalbot/store/leasing.py", "engine/harness/steps.py",
                 "engine/__main__.py", "remote/box.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "evalbot/engine").symlink_to("../engine")
    page = ("## Packages\n\n### evalbot/ (the bot host)\n\n| package | what | modules |\n|---|---|---|\n"
            "| `store/` | the store | `jobs` (see `leasing`), `intake` |\n\n"
            "### engine/\n\n| `harness/` | steps | `steps` |\n| (top) | entry | `__main__` |\n\n"
            "### remote/\n\n| (top) | boxes | `box` |\n\n## What may import what\n\n"
            "| `evalbot.store` | `ghost` |\n")
    assert problems(tmp_path, page) == [
        "evalbot/store/leasing.py: not in docs/architecture.md's tables",
        "evalbot/store/intake.py: named by docs/architecture.md but not in the tree",
    ]


def error_classes(root: Path = ROOT) -> set[str]:
    """Every class of the sources that derives from EvalbotError, however indirectly (by the
    last part of each base's name: `port.Transient` is `Transient`)."""
    bases: dict[str, set[str]] = {}
    for module in python_files(root):
        for name, listed in CLASS_LINE.findall((root / module).read_text()):
            bases.setdefault(name, set()).update(
                b.strip().rsplit(".", 1)[-1] for b in listed.split(",") if "=" not in b)
    found, grew = {BASE_ERROR}, True
    while grew:
        new = {name for name, of in bases.items() if of & found} - found
        found |= new
        grew = bool(new)
    return found - {BASE_ERROR}


def error_tree(text: str) -> str:
    return ("\n" + text).split("\n## The error tree", 1)[1].split("\n## ", 1)[0]


def test_the_error_tree_names_every_subclass_of_the_base_error() -> None:
    classes = error_classes()
    tree = error_tree(PAGE.read_text())
    drawn = set(re.findall(r"^ *([A-Z]\w+)", tree.split("```")[1], re.MULTILINE))
    assert len(classes) >= 9  # the check found the tree at all (9 subclasses at issue 54)
    assert sorted(classes - drawn) == [], "subclasses of EvalbotError the tree does not draw"
    assert sorted(drawn - classes - {BASE_ERROR}) == [], "drawn, but not an EvalbotError"
    described = {name for name in classes if f"| `{name}` |" in tree}
    assert sorted(classes - described) == [], "subclasses with no row (raised when, user sees)"
