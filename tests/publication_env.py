"""What the publication fault tests share: the stub engine's repository with a measured head, a PR
on the fake GitHub in the state its admission left (the pending comment, `eval:pending`, a pending
status), the finished job in the store, and what a PR shows (the head and kind of each of the
bot's comments, read from the hidden marker)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalbot.config.settings import Config, load_config
from evalbot.github import texts
from evalbot.github.publish import status_state
from evalbot.report.render import MARKER_PREFIX
from evalbot.store.jobs import Store
from tests.github.accounts import BOT, MAINTAINER, PACING
from tests.github.fake_github import REPO, FakeGitHub, Pull
from tests.graded_history import measure, record
from tests.service_env import write_config
from tests.stub_engine import make_repo


@dataclass(frozen=True)
class Measured:
    """The stub repository: main, a `faster` head measured (its results and verdict) and a
    `neutral` head nobody measured yet."""

    repo: Path
    main: str
    shas: dict[str, str]
    results: dict[str, Any]
    verdict: dict[str, Any]


def measured(root: Path) -> Measured:
    repo, main, shas = make_repo(root / "repo", {"faster": {"decode": 1300.0, "prefill": 1.3e6},
                                                 "neutral": {}})
    results, verdict = measure(repo, main, shas["faster"], root / "job")
    return Measured(repo, main, shas, results, verdict)


def service_config(root: Path, fake: FakeGitHub, m: Measured, store: Path | None = None
                   ) -> Config:
    """The stub profile's config with one local box on the stub repository, against the fake;
    `store`: the store somewhere else than next to the config (a small disk)."""
    github = (f'github:\n  repo: {REPO}\n  api_url: {fake.api_url}\n  bot_login: "{BOT}"\n{PACING}'
              # a refused publication is tried again after 0.5 s, not GitHub-paced 5 s
              'service:\n  publish_retry_s: 0.5\n')
    config = write_config(root, m.repo, github=github)
    if store is None:
        return config
    text = config.source.read_text().replace(f"store: {config.store}", f"store: {store}")
    config.source.write_text(text)
    return load_config(config.source)


def queued(fake: FakeGitHub, number: int, head: str, base: str, context: str = "evalbot") -> None:
    """The PR as its admission left it: the pending comment, `eval:pending`, a pending status."""
    fake.add_pull(Pull(number, head, base, MAINTAINER), labels=["eval:pending"])
    cid = max(fake.state.comments, default=900) + 1
    fake.state.comments[cid] = {"issue": number, "author": BOT, "body": texts.pending_comment(
        head, "queued", "Queued for evaluation.", context)}
    fake.state.statuses.setdefault(head, []).append(
        {"state": "pending", "description": f"queued: {head[:10]}", "context": context,
         "creator": BOT, "target_url": ""})


def finished(config: Config, number: int, m: Measured) -> str:
    """The faster head's job, done with its verdict and not yet published; its id."""
    store = Store(config.store)
    try:
        return record(store, REPO, number, m.main, m.shas["faster"], m.results, m.verdict)
    finally:
        store.close()


def shown(bodies: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """(head, kind) of every evalbot comment among these bodies ("queued" while pending)."""
    found = []
    for body in bodies:
        first = body.split("\n", 1)[0]
        if first.startswith(MARKER_PREFIX):
            doc = json.loads(first[len(MARKER_PREFIX):].removesuffix(" -->"))
            found.append((doc["head"], doc["kind"]))
    return found


def published(fake: FakeGitHub, number: int, head: str, verdict: dict[str, Any]) -> bool:
    """The PR shows this verdict: one comment, its labels and, last on the head, its status."""
    bodies = [str(c["body"]) for c in fake.comments_on(number) if c["author"] == BOT]
    statuses = fake.state.statuses.get(head, [])
    return shown(bodies) == [(head, verdict["kind"])] and len(bodies) == 1 \
        and fake.labels_on(number) == set(verdict["labels"]) \
        and bool(statuses) and statuses[-1]["state"] == status_state(verdict["kind"])


@contextmanager
def small_disk(size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` to put a store on and fill (CI runs as root: `mount` is permitted)."""
    with tempfile.TemporaryDirectory(prefix="evalbot-storedisk-") as tmp:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", tmp],
                       check=True)
        try:
            yield Path(tmp)
        finally:
            subprocess.run(["umount", "--lazy", tmp], check=True)


def fill(disk: Path) -> Path:
    """Fill the disk to the last byte with one file; its path (delete it to free the disk)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 512, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)
    return filler
