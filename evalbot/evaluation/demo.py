"""`evalbot demo`: the whole pipeline on the bundled demo engine, on this machine."""

from __future__ import annotations

import secrets
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from evalbot.config.errors import EvalbotError
from evalbot.config.redact import for_boxes
from evalbot.config.resources import LABELS_FILE
from evalbot.config.settings import BoxConfig
from evalbot.engine.demo import generate
from evalbot.evaluation.evaluate import Outcome, evaluate
from evalbot.evaluation.profile import load_profile
from evalbot.evaluation.progress import evaluation_bar
from evalbot.grading.policy import load_labels
from evalbot.remote.local import LocalBox
from evalbot.report.comment import CommentContext
from evalbot.store.jobs import Store

# What each demo PR must come out as: the kind of verdict, not the exact tier.
EXPECTED = {"faster": "improved", "neutral": "neutral", "slow_long": "regressed",
            "broken": "incorrect"}
DEMO_REPO = "demo/engine"
ENGINE_DIR = "demo-engine"  # out/demo-engine/: the generated repository and model, kept for
# the comments' Reproduce block
GENERATED = ["engine-repo", "models"]  # what engine.demo.generate writes there


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
    write the outputs. The four PRs share one correctness seed (fresh per demo unless given):
    they score the same windows, so the reference and main score them once, on the first PR,
    and the others read them from the box's caches, as a box's later evaluations of one main
    would. The demo shows four verdicts, not four draws of the held-out text."""
    out.mkdir(parents=True, exist_ok=True)
    seed = seed if seed is not None else secrets.randbelow(2**31)
    profile = load_profile("demo")
    policy = load_labels(LABELS_FILE).policy("default")
    store = Store(out / "evalbot.sqlite3")
    results = []
    console.print("generating the demo engine repository (main + 4 PR commits)")
    repo = generate(fresh_engine_dir(out / ENGINE_DIR))
    missing = dashboard_missing()
    links = demo_links(repo.path, with_dashboard=not missing)
    with tempfile.TemporaryDirectory(prefix="evalbot-demo-") as tmp:
        box_config = BoxConfig(name="local", kind="local", workdir=str(Path(tmp) / "box"),
                               repo=str(repo.path), models_dir=str(repo.model_path.parent),
                               trusted=True, python=sys.executable)
        box = LocalBox(box_config.name, box_config.workdir)
        # The kept repository is this machine's own demo, named in the comments on purpose.
        redact = for_boxes([replace(box_config, repo="")])
        for number, (name, sha) in enumerate(repo.prs.items(), start=1):
            if only and name not in only:
                continue
            with evaluation_bar(console, f"PR #{number} {name:<9}") as progress:
                outcome = evaluate(box, box_config, profile, policy, repo=DEMO_REPO, pr=number,
                                   base_sha=repo.main_sha, head_sha=sha, out=out / name,
                                   store=store, redact=redact, seed=seed, progress=progress,
                                   links=links)
            results.append(DemoResult(name, number, outcome))
    write_dashboard(store, out / "dashboard", console, missing)
    store.close()
    return results


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
