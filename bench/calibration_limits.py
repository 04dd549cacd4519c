"""Where `evalbot calibrate` starts warning: per shipped profile and cell, the largest calibrated
noise floor (sd of ln(head/base) per pair) that still leaves the policy's thresholds decidable
at the profile's last look, found by bisection on evalbot.service.calibrate_report.undecidable
(the check calibrate runs), beside the floor the profile ships. Above the limit no PR comes out
neutral on that cell; the issue's 53% demo floor is far above it.

Usage: python bench/calibration_limits.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evalbot.config.resources import LABELS_FILE  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading.policy import Policy, load_labels  # noqa: E402
from evalbot.service.calibrate_report import undecidable  # noqa: E402

BOX = BoxConfig(name="gpu-a", kind="local", workdir="/nonexistent", repo="/nonexistent")
SHA = "a" * 40
PROFILES = (("demo", "default"), ("llamacpp", "default"), ("sparkinfer", "sparkinfer-compat"))


def limit(profile: Profile, policy: Policy, cell: str, cells: list[str], pairs: int) -> float:
    """The largest floor of `cell` (the others at the profile's) calibrate does not warn on."""
    def warns(floor: float) -> bool:
        noise = {c: (floor if c == cell else profile.speed.sd_floor, pairs) for c in cells}
        return any(u.cell == cell for u in undecidable(noise, profile, policy, BOX, SHA))
    low, high = 1e-4, 4.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (low, mid) if warns(mid) else (mid, high)
    return low


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0]).parse_args(argv)
    book = load_labels(LABELS_FILE)
    print(f"{'profile':<11} {'policy':<18} {'cell':<28} {'looks':>5} {'shipped':>8} "
          f"{'limit@6':>8} {'limit@12':>9}")
    for name, policy_name in PROFILES:
        profile, policy = load_profile(name), book.policy(policy_name)
        cells = [f"{r.model}/{c.metric}@{c.ctx}" for r in profile.runs for c in r.cells]
        shipped = {f"{r.model}/{c.metric}@{c.ctx}": c.sd_floor or profile.speed.sd_floor
                   for r in profile.runs for c in r.cells}
        for cell in cells:
            six, twelve = (limit(profile, policy, cell, cells, n) for n in (6, 12))
            print(f"{name:<11} {policy.ident:<18} {cell[-28:]:<28} {max(profile.speed.looks):>5} "
                  f"{100 * shipped[cell]:>7.2f}% {100 * six:>7.2f}% {100 * twelve:>8.2f}%")


if __name__ == "__main__":
    main()
