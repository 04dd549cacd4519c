"""Every results fixture under tests/data/ regrades, under every policy of labels.yaml, to the very
bytes it gave when the golden file was written: moving the verdict's code changes none of them
(issue 54). The golden holds the SHA-256 of each verdict's signed bytes (audit/signing.py), or the
error that fixture is refused with.

    python -m tests.test_verdict_golden    # rewrite the golden after a deliberate change, and
                                           # say in the commit which verdicts changed and why
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from evalbot.audit.signing import canonical_bytes
from evalbot.config.errors import EvalbotError
from evalbot.engine.contract.results import upgrade, validate
from evalbot.evaluation.evaluate import failure_verdict
from evalbot.grading.policy import load_labels
from evalbot.report.publication import graded

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDEN = DATA / "verdicts.golden.json"
LABELS = load_labels(ROOT / "labels.yaml")


def _digest(verdict: dict[str, Any]) -> str:
    digest = hashlib.sha256(canonical_bytes(verdict)).hexdigest()
    return f"{verdict['kind']} {verdict['headline']} sha256:{digest}"


def _regraded(path: Path, policy: str) -> str:
    try:
        return _digest(graded(validate(upgrade(json.loads(path.read_text()))),
                              LABELS.policy(policy)))
    except EvalbotError as exc:  # refused fixtures stay refused, with the same message
        return f"{type(exc).__name__}: {exc}"


def verdicts() -> dict[str, str]:
    """Each fixture and policy ("path|policy"), and the failure verdict, to its digest."""
    out = {f"{path.relative_to(ROOT)}|{policy}": _regraded(path, policy)
           for path in sorted(DATA.rglob("*.results.json")) for policy in sorted(LABELS.policies)}
    job = SimpleNamespace(id="job-golden", base_sha="a" * 40, head_sha="b" * 40)
    out["failure_verdict|default"] = _digest(failure_verdict(
        job, LABELS.policy("default"), "demo", "the box did not answer"))  # type: ignore[arg-type]
    return out


def test_every_fixture_regrades_to_its_golden_verdict() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = verdicts()
    assert sorted(now) == sorted(golden), "fixtures added or removed: rewrite the golden"
    changed = {k: (golden[k], now[k]) for k in golden if golden[k] != now[k]}
    assert not changed, f"{len(changed)} verdicts changed (golden, now): {changed}"


def test_the_golden_holds_graded_verdicts_of_each_kind() -> None:
    """The golden is worth something only if it holds verdicts, not a page of refusals."""
    graded_ones = [v.split(" ")[:2] for v in json.loads(GOLDEN.read_text()).values()
                   if " sha256:" in v]
    kinds = {kind for kind, _ in graded_ones}
    assert {"improved", "neutral", "inconclusive", "regressed", "incorrect", "spoofed",
             "infra-error"} <= kinds
    assert {"eval:S", "eval:M", "eval:L", "eval:XL"} & {headline for _, headline in graded_ones}


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(verdicts(), indent=1, sort_keys=True) + "\n")
    print(f"{GOLDEN.relative_to(ROOT)}: {len(json.loads(GOLDEN.read_text()))} verdicts",
          file=sys.stderr)
