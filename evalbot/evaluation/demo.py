"""`evalbot demo`: the whole pipeline on the bundled demo engine, on this machine."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

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
# The comments link to the dashboard written next to them and to their own folder.
LINKS = CommentContext(repo=DEMO_REPO, clone='"$ENGINE_REPO"', dashboard_url="../dashboard",
                       run_url=".")


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
    write the outputs."""
    out.mkdir(parents=True, exist_ok=True)
    profile = load_profile("demo")
    policy = load_labels(LABELS_FILE).policy("default")
    store = Store(out / "evalbot.sqlite3")
    results = []
    with tempfile.TemporaryDirectory(prefix="evalbot-demo-") as tmp:
        console.print("generating the demo engine repository (main + 4 PR commits)")
        repo = generate(Path(tmp) / "demo")
        box_config = BoxConfig(name="local", kind="local", workdir=str(Path(tmp) / "box"),
                               repo=str(repo.path), models_dir=str(repo.model_path.parent),
                               trusted=True, python=sys.executable)
        box = LocalBox(box_config.name, box_config.workdir)
        redact = for_boxes([box_config])
        for number, (name, sha) in enumerate(repo.prs.items(), start=1):
            if only and name not in only:
                continue
            with evaluation_bar(console, f"PR #{number} {name:<9}") as progress:
                outcome = evaluate(box, box_config, profile, policy, repo=DEMO_REPO, pr=number,
                                   base_sha=repo.main_sha, head_sha=sha, out=out / name,
                                   store=store, redact=redact, seed=seed, progress=progress,
                                   links=LINKS)
            results.append(DemoResult(name, number, outcome))
    write_dashboard(store, out / "dashboard", console)
    store.close()
    return results


def write_dashboard(store: Store, out: Path, console: Console) -> None:
    """The dashboard the comments' relative links point at; an install without the `dashboard`
    extra (matplotlib) still gets its verdicts, and is told what it skipped."""
    from evalbot.config.errors import EvalbotError

    try:
        from evalbot.report.dashboard import build_site
    except EvalbotError as exc:
        console.print(f"dashboard not written: {exc}")
        return
    build_site(store, out)
