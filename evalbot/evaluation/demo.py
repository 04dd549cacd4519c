"""`evalbot demo`: the whole pipeline on the bundled demo engine, on this machine."""

from __future__ import annotations

import secrets
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from evalbot.config.errors import EvalbotError
from evalbot.config.redact import Redactor, for_boxes
from evalbot.config.resources import LABELS_FILE
from evalbot.config.settings import BoxConfig
from evalbot.engine.demo import generate
from evalbot.evaluation.evaluate import Outcome, evaluate
from evalbot.evaluation.profile import Profile, load_profile
from evalbot.evaluation.progress import evaluation_bars
from evalbot.grading.policy import Policy, load_labels
from evalbot.remote.local import LocalBox
from evalbot.report.comment import CommentContext
from evalbot.store.jobs import JobRow, Store

# What each demo PR must come out as: the kind of verdict, not the exact tier.
EXPECTED = {"faster": "improved", "neutral": "neutral", "slow_long": "regressed",
            "broken": "incorrect"}
DEMO_REPO = "demo/engine"
ENGINE_DIR = "demo-engine"  # out/demo-engine/: the generated repository and model, kept for
# the comments' Reproduce block
GENERATED = ["engine-repo", "models"]  # what engine.demo.generate writes there
# The PRs' lanes, run side by side (two cores: one busy process each), balanced by the PRs' box
# time: `neutral` measures and witnesses an A/A to late looks, `faster` confirms three savings;
# `slow_long` (a regression, no witness) and `broken` are short. Split so, the longer lane of
# 9 measured demos (docs/statistics.md, the demo's section: their box time per PR) was 5%
# shorter on average than with `neutral` alone in one lane (shorter in 6, by 4-23%)
LANES = (("neutral", "slow_long"), ("faster", "broken"))


@dataclass(frozen=True)
class DemoResult:
    name: str
    pr: int
    outcome: Outcome

    @property
    def as_expected(self) -> bool:
        return self.outcome.verdict["kind"] == EXPECTED[self.name]


def run_demo(out: Path, console: Console, seed: int | None = None,
             only: tuple[str, ...] = ()) -> list[DemoResult]:
    """Generate the demo repository, evaluate each PR commit (or those in `only`) against main,
    write the outputs. The PRs run in LANES side by side, one after another within a lane. The
    four PRs share one correctness seed (fresh per demo unless given): they score the same
    windows, so in each lane the reference and main score them once, on its first PR, and the
    others read them from the lane's box caches, as a box's later evaluations of one main
    would. The demo shows four verdicts, not four draws of the held-out text."""
    out.mkdir(parents=True, exist_ok=True)
    console.print("generating the demo engine repository (main + 4 PR commits)")
    repo = generate(fresh_engine_dir(out / ENGINE_DIR))
    missing = dashboard_missing()
    prs = [(number, name, sha) for number, (name, sha) in enumerate(repo.prs.items(), start=1)
           if not only or name in only]
    with tempfile.TemporaryDirectory(prefix="evalbot-demo-") as tmp:
        lanes = [[pr for pr in prs if pr[1] in lane] for lane in LANES]
        boxes = [BoxConfig(name="local", kind="local", workdir=str(Path(tmp) / f"box-{i}"),
                           repo=str(repo.path), models_dir=str(repo.model_path.parent),
                           trusted=True, python=sys.executable) for i in range(len(lanes))]
        demo = Demo(out, repo.main_sha, load_profile("demo"),
                    load_labels(LABELS_FILE).policy("default"),
                    # the kept repository is this machine's own demo, named in the comments on
                    # purpose; the lanes' box folders are not
                    for_boxes([replace(b, repo="") for b in boxes]),
                    demo_links(repo.path, with_dashboard=not missing),
                    seed if seed is not None else secrets.randbelow(2**31))
        store = Store(out / "evalbot.sqlite3")  # its tables made once, before the lanes open it
        turn = threading.Lock()
        with evaluation_bars(console) as add, ThreadPoolExecutor(len(lanes)) as pool:
            running = [pool.submit(demo.lane, box, lambda: LaneStore(store.path, turn), lane, add)
                       for box, lane in zip(boxes, lanes, strict=True) if lane]
            results = sorted((r for lane in running for r in lane.result()), key=lambda r: r.pr)
    write_dashboard(store, out / "dashboard", console, missing)
    store.close()
    return results


@dataclass(frozen=True)
class Demo:
    """What every evaluation of one demo shares."""

    out: Path
    main_sha: str
    profile: Profile
    policy: Policy
    redact: Redactor
    links: CommentContext
    seed: int

    def lane(self, box_config: BoxConfig, open_store: Callable[[], Store],
             prs: list[tuple[int, str, str]], add_bar: Callable[[str], Any]) -> list[DemoResult]:
        """One lane's PRs, one after another on its own box folder (a box's builds and
        correctness caches are one job's at a time), with the store opened in the lane's own
        thread (sqlite's connections are their thread's)."""
        box = LocalBox(box_config.name, box_config.workdir)
        store = open_store()
        try:
            return [DemoResult(name, number, evaluate(
                box, box_config, self.profile, self.policy, repo=DEMO_REPO, pr=number,
                base_sha=self.main_sha, head_sha=sha, out=self.out / name, store=store,
                redact=self.redact, seed=self.seed, progress=add_bar(f"PR #{number} {name:<9}"),
                links=self.links)) for number, name, sha in prs]
        finally:
            store.close()


class LaneStore(Store):
    """The demo's store as one lane opens it. An evaluation enqueues its job and leases at once,
    and a lease takes the fairest queued job, which could be the other lane's: the lanes take
    turns from an enqueue to the lease after it (`turn`, one lock for the demo)."""

    def __init__(self, path: Path, turn: threading.Lock) -> None:
        super().__init__(path)
        self.turn = turn
        self.holding = False

    def enqueue(self, repo: str, pr: int | None, head_sha: str, policy: str,
                base_sha: str = "", attempt: int = 1) -> JobRow:
        self.turn.acquire()
        self.holding = True
        try:
            return super().enqueue(repo, pr, head_sha, policy, base_sha, attempt)
        except BaseException:
            self._pass_turn()
            raise

    def lease(self, worker: str, ttl_s: float, box: str = "") -> JobRow | None:
        try:
            return super().lease(worker, ttl_s, box)
        finally:
            self._pass_turn()

    def _pass_turn(self) -> None:
        if self.holding:
            self.holding = False
            self.turn.release()


def fresh_engine_dir(path: Path) -> Path:
    """The folder the demo generates its engine into, under --out: the Reproduce block names it,
    so it stays. An earlier demo's is replaced (generation is deterministic: the same commits);
    anything else there is the user's, and is refused, never deleted."""
    if path.exists():
        if not path.is_dir() or sorted(p.name for p in path.iterdir()) != GENERATED:
            raise EvalbotError(f"{path} exists and is not an earlier demo's engine "
                               f"({' and '.join(GENERATED)}); choose another --out")
        shutil.rmtree(path)
    return path


def dashboard_missing() -> str:
    """Why this install cannot draw the dashboard (no `dashboard` extra: matplotlib), or ""."""
    try:
        import evalbot.report.dashboard  # noqa: F401  (charts.py says what is missing)
    except EvalbotError as exc:
        return str(exc)
    return ""


def demo_links(repo: Path, with_dashboard: bool) -> CommentContext:
    """The comments link to the dashboard written next to them (only where one is written) and
    to their own folder; their Reproduce block names the kept repository."""
    return CommentContext(repo=DEMO_REPO, clone=shlex.quote(str(repo)),
                          dashboard_url="../dashboard" if with_dashboard else "", run_url=".")


def write_dashboard(store: Store, out: Path, console: Console, missing: str) -> None:
    """The dashboard the comments' relative links point at; an install without the `dashboard`
    extra still gets its verdicts, and is told what it skipped (escaped: rich would take
    `[dashboard]` in the hint for markup and print `pip install 'evalbot'`)."""
    if missing:
        console.print(f"dashboard not written: {escape(missing)}")
        return
    from evalbot.report.dashboard import build_site

    build_site(store, out)
