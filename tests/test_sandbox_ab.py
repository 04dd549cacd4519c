"""scripts/sandbox_ab.py, the same-box comparison of two sandbox launchers (issue 31, GPU): its
pairs alternate, its change is new / old over the pairs, and a side that fails stops it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "sandbox_ab.py"
# a launcher's interface (`run SPEC -- ARGV`): this one runs ARGV with the spec's RATE exported
LAUNCHER = """import os, sys
spec = __import__("json").loads(sys.argv[2])
os.environ["RATE"] = str(spec["rate"][os.path.basename(__file__)])
os.execv(sys.argv[4], sys.argv[4:])
"""
WORK = ("import os, json; r = float(os.environ['RATE']); "
        "print('SWEEP_JSON ' + json.dumps({'4096': {'decode_tps': r, 'prefill_pp': 10 * r}}))")


def _run(tmp: Path, old: float, new: float, pairs: int = 4) -> subprocess.CompletedProcess[str]:
    for name in ("old.py", "new.py"):
        (tmp / name).write_text(LAUNCHER)
    spec = json.dumps({"rate": {"old.py": old, "new.py": new}})
    return subprocess.run([sys.executable, str(SCRIPT), "--old", str(tmp / "old.py"), "--new",
                           str(tmp / "new.py"), "--spec", spec, "--pairs", str(pairs), "--out",
                           str(tmp / "ab.json"), "--", sys.executable, "-c", WORK],
                          capture_output=True, text=True, check=False)


def test_equal_rates_are_within_the_margin_and_a_3pct_change_is_not(tmp_path: Path) -> None:
    same = _run(tmp_path, 100.0, 100.0)
    assert same.returncode == 0, same.stderr
    assert "| decode@4096 | 100 | 100 | +0.00% | [+0.00%, +0.00%] | yes |" in same.stdout
    faster = _run(tmp_path, 100.0, 103.0)
    assert "| prefill@4096 | 1000 | 1030 | +3.00% | [+3.00%, +3.00%] | no |" in faster.stdout
    kept = json.loads((tmp_path / "ab.json").read_text())["pairs"]
    # ABBA: the first pair starts with the old launcher, the second with the new
    assert [list(p) for p in kept] == [["old", "new"], ["new", "old"]] * 2


def test_a_side_that_fails_stops_the_comparison_naming_it(tmp_path: Path) -> None:
    (tmp_path / "new.py").write_text("import sys; sys.exit(126)")
    (tmp_path / "old.py").write_text(LAUNCHER)
    done = subprocess.run([sys.executable, str(SCRIPT), "--old", str(tmp_path / "old.py"),
                           "--new", str(tmp_path / "new.py"), "--spec", '{"rate": {"old.py": 1}}',
                           "--pairs", "2",
                           "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "new.py exited 126" in done.stderr
