"""The demo witness's floor on this machine: A/A pairs of main's witness process as the harness
runs it (the demo profile's witness argv and spec, the stepped handoff, each pair on one fresh
prompt), timed by the harness's `cpu` clock (the run's cgroup over the handoff span) where this
machine may make cgroups, and by the handoff span. Prints the per-pair sd of both, and each
variant's mean (main and `faster`), for the profile's `sd_floor_s` and its comment.

Usage: python scripts/demo_witness_floor.py [--pairs 20] [--witness decode-64]
"""

from __future__ import annotations

import argparse
import statistics as st
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evalbot.engine.demo.repo import generate  # noqa: E402
from evalbot.engine.measure import witness  # noqa: E402
from evalbot.engine.sandbox import proc  # noqa: E402
from evalbot.evaluation.profile import load_profile  # noqa: E402

PROFILE = load_profile("demo")
ENV = PROFILE.env
SPEC = PROFILE.runs[0].witnesses[0]  # --witness picks another of the profile's


def timed(tree: Path, model: Path, ids: list[int]) -> tuple[float, float]:
    """(cpu clock, handoff clock) seconds of one witness process on `ids`."""
    argv = [a.format(python=sys.executable, harness=str(ROOT), build=str(tree), model=str(model),
                     ctxs="64,1024", tokens="") for a in SPEC.argv]
    argv = [str(tree / "demo_engine.py") if a.endswith("build/demo_engine.py") else a
            for a in argv]
    done = proc.run(argv, cwd=tree, timeout_s=120, log=tree / "witness.log", trusted=True, env=ENV,
                    handoff=witness.handoff_of(SPEC, ids), cpu_clock=True)
    if not done.ok or done.handoff_s is None:
        raise SystemExit(f"witness failed: {done.output[-500:]}")
    return (done.cpu_s if done.cpu_s is not None else float("nan")), done.handoff_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--witness", default="decode-64", help="the demo profile's witness to time")
    a = ap.parse_args()
    global SPEC  # noqa: PLW0603 (a script: the witness `timed` runs)
    SPEC = next(w for w in PROFILE.runs[0].witnesses if w.name == a.witness)
    root = Path(tempfile.mkdtemp(prefix="demo-floor-"))
    demo = generate(root / "demo")
    trees = {}
    for name, ref in (("main", demo.main_sha), ("faster", demo.prs["faster"])):
        trees[name] = root / name
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(trees[name]), ref],
                       cwd=demo.path, check=True)
    rows: dict[str, list[tuple[float, float]]] = {"a": [], "b": [], "faster": []}
    for pair in range(a.pairs):
        ids = witness._prompt(SPEC, root / "prompts")  # the harness's own fresh draw
        for side in ("a", "b") if pair % 2 == 0 else ("b", "a"):
            rows[side].append(timed(trees["main"], demo.model_path, ids))
        if pair < 6:
            rows["faster"].append(timed(trees["faster"], demo.model_path, ids))
    for k, name in ((0, "cpu"), (1, "handoff")):
        d = [x[k] - y[k] for x, y in zip(rows["a"], rows["b"], strict=True)]
        print(f"{name}: main {st.mean(x[k] for x in rows['a'] + rows['b']):.3f} s, faster "
              f"{st.mean(x[k] for x in rows['faster']):.3f} s; per-pair sd {st.stdev(d):.4f} s "
              f"over {len(d)} pairs")


if __name__ == "__main__":
    main()
