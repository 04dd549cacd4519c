"""GPU run 53L (docs/gpu-e2e.md), on one H100: issue 53's llamacpp witnesses measured and tried.

- witness-aa: main against main, 16 pairs of each of the three witnesses (`evalbot calibrate`'s
  job on a cut bench): the floors and `work_s` the shipped profile carries.
- hide-prefill: a head that computes every multi-id batch twice and has llama-bench print its
  prompt rates x2, under the candidate profile (hide-prefill.yaml): its processes took ~2 s
  longer than main's, its printed prefill@4096 only 5.3% slower, and it was REJECTed.

The fixtures are the run's files, less each sample's GPU readings (tests/data/llamacpp/h100-53L)."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from evalbot.engine.contract.results import validate
from evalbot.engine.measure import speed
from evalbot.evaluation.profile import load_profile
from evalbot.grading.grade import grade
from evalbot.grading.policy import load_labels
from evalbot.service.calibrate import witness_noise

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "llamacpp" / "h100-53L"
POLICY = load_labels(ROOT / "labels.yaml").policy("default")
PREFILL = "qwen3-0p6b-synth/prefill@4096"
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import llama_witnesses, summary  # noqa: E402


def _results(name: str) -> dict[str, Any]:
    results = json.loads((RUN / f"{name}.results.json").read_text())
    validate(results)
    return results


def test_the_hiding_head_regrades_to_what_the_run_published() -> None:
    published = json.loads((RUN / "hide-prefill.verdict.json").read_text())
    verdict = grade(_results("hide-prefill"), POLICY)
    assert verdict["headline"] == published["headline"] == "eval:REJECT"
    assert [(c["key"], c["decision"], c.get("confirmation")) for c in verdict["cells"]] == \
        [(c["key"], c["decision"], c.get("confirmation")) for c in published["cells"]]
    assert summary.judge("caught:prefill@4096", verdict)


def test_the_printed_rates_hid_most_of_the_head_s_extra_time() -> None:
    """The head's processes took 1.9-2.1 s longer than main's in every pair (wall time), while its
    printed prefill@4096 claims 5.3% of 0.5 s of prefill (3 repetitions of 4096 ids): ~0.03 s."""
    results = _results("hide-prefill")
    [samples] = [w for w in results["witnesses"] if w["source"] == "samples"]
    walls: dict[int, dict[str, float]] = {}
    for s in samples["samples"]:
        walls.setdefault(s["pair"], {})[s["side"]] = s["seconds"]
    extra = [p["head"] - p["base"] for p in walls.values()]
    assert len(extra) == 8 and min(extra) > 1.8
    [cell] = [c for c in results["cells"] if f"{c['model']}/{c['metric']}@{c['ctx']}" == PREFILL]
    base = np.mean([s["value"] for s in cell["samples"] if s["side"] == "base"])
    head = np.mean([s["value"] for s in cell["samples"] if s["side"] == "head"])
    printed_extra_s = 3 * 4096 * (1 / head - 1 / base)
    assert 0.01 < printed_extra_s < 0.05


def _printing_main_s_prefill_rate(results: dict[str, Any]) -> dict[str, Any]:
    """The same processes, had the head printed main's own prefill rate in every pair: the
    cells' looks are the harness's replay of those rates (it would have stopped at the first)."""
    doc = copy.deepcopy(results)
    for c in doc["cells"]:
        if c["metric"] == "prefill":
            base = {s["pair"]: s["value"] for s in c["samples"] if s["side"] == "base"}
            for s in c["samples"]:
                s["value"] = base[s["pair"]]
    for c, looks in zip(doc["cells"], speed.replay_all(doc["cells"], doc["rule"]), strict=True):
        c["looks"] = [{"decision": lk.decision, "pairs": lk.pairs} for lk in looks]
    return doc


def test_printing_main_s_rate_exactly_is_still_not_believed() -> None:
    """The hostile variant: no printed regression at all. The printed rate now says unchanged;
    the samples' wall times, 2 s a pair against a 0.48 s floor, say the head spent time its rates
    do not account for: prefill@4096 is not believed and the PR gets no better than
    inconclusive (the witnesses, which the REJECT spared, are not needed for it)."""
    doc = _printing_main_s_prefill_rate(_results("hide-prefill"))
    verdict = grade(doc, POLICY)
    cells = {c["key"]: c for c in verdict["cells"]}
    assert cells[PREFILL]["decision"] == "unconfirmed"
    assert cells[PREFILL]["confirmation"] == "time unaccounted for"
    assert summary.judge("caught:prefill@4096", verdict)
    assert verdict["headline"] == "eval:inconclusive"


def test_the_a_a_s_witnesses_agreed_with_main_on_every_process() -> None:
    results = _results("witness-aa")
    ran = [w for w in results["witnesses"] if w["source"] == "witness"]
    assert [w["name"] for w in ran] == ["prefill-4k-decode-896", "decode-0", "prefill-4096-at-4096"]
    for w in ran:
        kept = [s for s in w["samples"] if not s["dropped"]]
        assert len(kept) == 32 and all(s["verified"] and s["agreement"] == 1.0 for s in kept)


@pytest.mark.parametrize("profile", [RUN / "hide-prefill.yaml", "llamacpp"])
def test_the_floors_and_work_are_the_a_a_s(profile: Path | str) -> None:
    """The run's candidate and the shipped profile carry what `evalbot calibrate` reads from
    the A/A: each witness's pair sd (16 pairs, 15 degrees of freedom) and, for the new shapes,
    main's median seconds as `work_s`."""
    results = _results("witness-aa")
    floors = {k.split(":", 1)[1]: v for k, v in witness_noise(results).items()}
    assert {k: round(sd, 4) for k, (sd, _) in floors.items()} == \
        {"prefill-4k-decode-896": 0.0079, "decode-0": 0.0022, "prefill-4096-at-4096": 0.0015}
    work = llama_witnesses.work_of(results)
    p = load_profile(str(profile))
    ws = {w.name: w for r in p.runs for w in r.witnesses}
    assert set(ws) == set(floors) and p.speed.witness_every_cell
    for name, (sd, n) in floors.items():
        assert (ws[name].sd_floor_s, ws[name].floor_df) == (round(sd, 4), n - 1)
        assert ws[name].work_s == round(work.get(name, 0.0), 4)
    assert ws["decode-0"].work_s == 0.5648 and ws["prefill-4096-at-4096"].work_s == 0.185


def test_nothing_published_names_a_host_address_or_port() -> None:
    for path in sorted(RUN.iterdir()):
        text = path.read_text()
        assert not re.search(r"\b\d{1,3}(\.\d{1,3}){3}\b", text), path.name
        assert not re.search(r"(ssh://|https?://|:\d{2,5}\b(?!\.))", text), path.name
    assert "--repo [redacted]" in (RUN / "hide-prefill.comment.md").read_text()
    for name in ("hide-prefill.yaml", "witness-aa.yaml"):
        assert "host" not in yaml.safe_load((RUN / name).read_text())
