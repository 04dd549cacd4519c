"""The shipped demo profile cut down, for tests of a flow rather than of the demo's statistics.

A test that checks the pipeline around an evaluation (a push superseding a run, the comment, the
labels and status, a box over SSH, a witness contradicting a lie) needs a right verdict, not
every cell of the demo: `cut_demo_profile` keeps the shipped profile as it is (models, build,
looks, floors, budget, witness, correctness) with only the decode@64 cell and its witness. Each
sample then runs one context instead of 64 and 1024 (no 1024-token prefill, no decode at
1024), so the witness's box-time share grows fourfold (up to 10): the witness is the shipped
one, its samples a third of the box time. `evalbot demo` and tests/test_demo_e2e.py keep the whole
shipped profile.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from evalbot.evaluation.profile import PROFILES_DIR

KEPT_CELL = {"metric": "decode", "ctx": 64}
MAX_SHARE = 10.0  # engine/contract/rule.py: a share in (0, 10]


def cut_share(shipped: float) -> float:
    """The cut profile's witness share: four times the shipped one's, at most MAX_SHARE."""
    return min(4 * shipped, MAX_SHARE)


def cut_demo_profile(dest: Path) -> Path:
    """Write the cut profile into dest and return its path (a profile: value or load_profile)."""
    doc = yaml.safe_load((PROFILES_DIR / "demo.yaml").read_text())
    doc["name"] = "demo-cut"
    [run] = doc["speed"]["runs"]
    assert KEPT_CELL in run["cells"], "the shipped demo profile lost its decode@64 cell"
    run["cells"] = [KEPT_CELL]
    # and only the witness of that cell (the shipped profile witnesses every cell since version 5)
    run["witnesses"] = [w for w in run["witnesses"] if set(w["cells"]) == {"decode@64"}]
    # its samples lost two of their three cells (a third of the measuring's box time), not the
    # witness sized for the whole profile: its share grows to match, up to the most a profile
    # may give
    doc["speed"]["witness_share"] = cut_share(doc["speed"]["witness_share"])
    # the long correctness windows exist for the decode cells at 1024 tokens of context
    doc["correctness"]["long_windows"] = 0
    doc["correctness"].pop("long_window_tokens", None)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "demo-cut.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


FIRST_LOOK = 2  # the fewest pairs a profile's first look may have (evalbot/evaluation/profile.py)
FIRST_WITNESS_LOOK = 3  # and a witness's (engine/contract/witness_spec.py)
WITNESS_KEPT, WITNESS_ONE_LOOK, NO_WITNESS = "kept", "one look", "none"


def one_look_demo_profile(dest: Path, witness: str = WITNESS_KEPT) -> Path:
    """The cut profile at the least a verdict costs, for a test of what surrounds any evaluation
    (a disk left full, a warmed cache, what reaches a published file) and not of its statistics:
    one look of 2 pairs; builds, limits, samples and correctness are the cut profile's. Its
    witness: the cut profile's (WITNESS_KEPT: an unchanged cell is believed only where the
    witness rules a slowdown out, which its first look of 3 pairs seldom does), one look of 3
    pairs (WITNESS_ONE_LOOK: the witness process runs, its verdict is not asked) or none.
    Its verdict may well be inconclusive where the cut profile's would decide."""
    path = cut_demo_profile(dest)
    doc = yaml.safe_load(path.read_text())
    doc["name"] = "demo-one-look"
    doc["speed"]["looks"] = [FIRST_LOOK]
    [run] = doc["speed"]["runs"]
    if witness == WITNESS_ONE_LOOK:
        for w in run["witnesses"]:
            w["pairs"] = [FIRST_WITNESS_LOOK]
    elif witness == NO_WITNESS:
        run["witnesses"] = []
        doc["speed"]["witness_every_cell"] = False
    else:
        assert witness == WITNESS_KEPT, witness
    quick = dest / "demo-one-look.yaml"
    quick.write_text(yaml.safe_dump(doc, sort_keys=False))
    return quick
