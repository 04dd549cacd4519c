"""Heads as real commits: each head is a branch off `main` whose edits are small source changes,
each checked against the text it replaces (which must occur exactly once), so a head never
lands silently on the wrong line of another engine version.

    python3 -m gpu_runner.heads ENGINE REPO [HEAD ...]   (from scripts/)
        commits the heads (all of the engine's, or the ones named) as branches of REPO and
        prints NAME=SHA for each, `main` included ('-' as '_', in capitals: a shell can source it)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpu_runner import heads_llamacpp, heads_sparkinfer

# one edit: (file, old text, new text); an empty old text appends the new text to the file
Edit = tuple[str, str, str]
ENGINES: dict[str, dict[str, tuple[str, list[Edit]]]] = {
    "sparkinfer": heads_sparkinfer.HEADS, "llamacpp": heads_llamacpp.HEADS}


def edited(text: str, old: str, new: str, where: str) -> str:
    if not old:
        return text + new
    if text.count(old) != 1:
        raise ValueError(f"{where} has {text.count(old)} copies of {old!r}, not one")
    return text.replace(old, new)


def check(tree: Path, engine: str) -> list[str]:
    """Every head's edits against an unpacked tree, nothing written: the problems found."""
    problems = []
    for branch, (_, edits) in ENGINES[engine].items():
        for rel, old, new in edits:
            try:
                edited((tree / rel).read_text(), old, new, f"{branch}: {rel}")
            except (OSError, ValueError) as exc:
                problems.append(str(exc))
    return problems


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=evalbot-e2e", "-c", "user.email=e2e@localhost",
                           *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def commit_heads(repo: Path, engine: str, names: list[str] | None = None) -> dict[str, str]:
    heads = ENGINES[engine]
    shas = {"main": git(repo, "rev-parse", "main")}
    for branch in names or list(heads):
        message, edits = heads[branch]
        git(repo, "checkout", "-q", "-B", branch, "main")
        for rel, old, new in edits:
            path = repo / rel
            path.write_text(edited(path.read_text(), old, new, f"{branch}: {rel}"))
        git(repo, "commit", "-qam", message)
        shas[branch] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return shas


def main() -> int:
    engine, repo, *names = sys.argv[1:]
    for branch, sha in commit_heads(Path(repo), engine, names).items():
        print(f"{branch.upper().replace('-', '_')}={sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
