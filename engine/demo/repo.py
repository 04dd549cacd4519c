"""Generate the demo engine's git repository: a `main` commit and one commit
per PR variant, each on its own branch `pr/<name>`.

Layout under `dest`:
    dest/engine-repo/          the git repository (demo_engine.py, build.py, README.md)
    dest/models/demo-tiny.evdm the model weights (outside the repo: PRs cannot change them)

The variants are stored as small replacement blocks over the main source
(template/variants/<name>.txt), so each PR's diff is exactly what it changes.
Generating the repository needs git and numpy only.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .weights import write_weights

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
MODEL_NAME = "demo-tiny.evdm"

# Variant name -> commit message of its PR commit (order = creation order).
_VARIANTS: dict[str, str] = {
    "faster": "attention: batch heads, skip masked blocks in prefill, fuse qkv",
    "neutral": "refactor: move the transformer block into its own method",
    "slow_long": "attention: read long KV caches in fixed-size chunks during decode",
    "broken": "attention: simplify the softmax scale",
}

# Fixed identity and dates so commit shas are reproducible and git needs no config.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "evalbot demo",
    "GIT_AUTHOR_EMAIL": "demo@evalbot.invalid",
    "GIT_COMMITTER_NAME": "evalbot demo",
    "GIT_COMMITTER_EMAIL": "demo@evalbot.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}
_MAIN_DATE = "2024-01-01T12:00:00+00:00"
_PR_DATE = "2024-01-02T12:00:00+00:00"


@dataclass(frozen=True)
class DemoRepo:
    path: Path
    main_sha: str
    prs: dict[str, str]  # variant name -> full 40-hex commit sha
    model_path: Path
    model_sha256: str


def variant_names() -> list[str]:
    return list(_VARIANTS)


def _template(name: str) -> str:
    return (TEMPLATE_DIR / name).read_text(encoding="utf-8")


def _parse_blocks(text: str) -> list[tuple[str, str]]:
    """Parse "<<<<<<< main / ======= / >>>>>>> name" blocks into (old, new) pairs.
    Lines outside blocks are comments."""
    blocks: list[tuple[str, str]] = []
    state = "outside"
    old: list[str] = []
    new: list[str] = []
    for line in text.splitlines(keepends=True):
        if state == "outside" and line.startswith("<<<<<<< "):
            state, old, new = "old", [], []
        elif state == "old" and line.rstrip("\n") == "=======":
            state = "new"
        elif state == "new" and line.startswith(">>>>>>> "):
            blocks.append(("".join(old), "".join(new)))
            state = "outside"
        elif state == "old":
            old.append(line)
        elif state == "new":
            new.append(line)
    if state != "outside":
        raise ValueError("unterminated replacement block")
    return blocks


def variant_source(name: str) -> str:
    """demo_engine.py of one variant ("main" or a PR name)."""
    source = _template("demo_engine.py.txt")
    if name == "main":
        return source
    if name not in _VARIANTS:
        raise KeyError(f"unknown variant {name!r}; known: {variant_names()}")
    for old, new in _parse_blocks(_template(f"variants/{name}.txt")):
        # Exactly one match, so a template edit cannot silently misapply a patch.
        count = source.count(old)
        if count != 1:
            raise ValueError(f"variant {name}: block matches {count} times, expected 1:\n{old}")
        source = source.replace(old, new)
    return source


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, **_GIT_ENV)
    if date is not None:
        env["GIT_AUTHOR_DATE"] = date
        env["GIT_COMMITTER_DATE"] = date
    proc = subprocess.run(["git", *args], cwd=repo, env=env, text=True,
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def _commit_all(repo: Path, message: str, date: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-gpg-sign", "-m", message, date=date)
    return _git(repo, "rev-parse", "HEAD")


def generate(dest: Path) -> DemoRepo:
    """Write the model and the engine repository under `dest` (created if needed;
    `dest/engine-repo` must not exist yet)."""
    dest = Path(dest).resolve()
    repo = dest / "engine-repo"
    if repo.exists():
        raise FileExistsError(f"{repo} already exists")
    model_path = dest / "models" / MODEL_NAME
    model_sha256 = write_weights(model_path)

    repo.mkdir(parents=True)
    _git(repo, "init", "-q")
    # Set the branch name this way rather than `init -b`, which needs git >= 2.28.
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (repo / "build.py").write_text(_template("build.py.txt"), encoding="utf-8")
    (repo / "README.md").write_text(_template("README.md.txt"), encoding="utf-8")
    (repo / ".gitignore").write_text(_template("gitignore.txt"), encoding="utf-8")
    engine_file = repo / "demo_engine.py"
    engine_file.write_text(variant_source("main"), encoding="utf-8")
    main_sha = _commit_all(repo, "demo engine: initial implementation", _MAIN_DATE)

    prs: dict[str, str] = {}
    for name, message in _VARIANTS.items():
        _git(repo, "checkout", "-q", "-b", f"pr/{name}", main_sha)
        engine_file.write_text(variant_source(name), encoding="utf-8")
        prs[name] = _commit_all(repo, message, _PR_DATE)
    _git(repo, "checkout", "-q", "main")
    return DemoRepo(path=repo, main_sha=main_sha, prs=prs, model_path=model_path,
                    model_sha256=model_sha256)
