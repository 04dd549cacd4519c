"""Issue 53's llamacpp candidate (scripts/gpu_runner/llama_witnesses.py), as run 53L of the GPU
runner derives it from a profile without it (the shipped one before version 7): a witness of each
"regressions only" cell's shape, every cell witnessed, the floors unmeasured until the run's own
witness A/A sets them. The shipped profile carries it since version 7, with 53L's floors."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_runner import llama_witnesses, profiles, summary  # noqa: E402
from gpu_runner.__main__ import config  # noqa: E402
from gpu_runner.catalogue import EVALUATIONS  # noqa: E402
from gpu_runner.chain import profile_argv  # noqa: E402

from evalbot.config.resources import LABELS_FILE  # noqa: E402
from evalbot.config.settings import BoxConfig  # noqa: E402
from evalbot.engine.contract.checks import ContractError  # noqa: E402
from evalbot.engine.contract.witness_spec import parse_witness  # noqa: E402
from evalbot.evaluation.profile import Profile, load_profile  # noqa: E402
from evalbot.grading.policy import load_labels  # noqa: E402
from evalbot.service.calibrate import calibration_job  # noqa: E402

SHIPPED = ROOT / "evalbot/profiles/llamacpp.yaml"
DIGESTS = {profiles.LLAMA_FILE: "c" * 64}
FLAGS = "--backend cuda --cuda-arch 90 --jobs 16"
M = "qwen3-0p6b-synth"  # the profile's model: its cell keys' prefix
AA = ROOT / "tests/data/llamacpp/h200-speedup-witness-fa-off.results.json"  # a real H200 witness


def before_v7() -> dict:
    """The shipped profile less what version 7 added: the depth witnesses, every cell
    witnessed, the H100 floor and room (the shipped witness's H200 floor and share of v6)."""
    doc = yaml.safe_load(SHIPPED.read_text())
    new = {w["name"] for w in llama_witnesses.DEPTH_WITNESSES}
    [run] = doc["speed"]["runs"]
    run["witnesses"] = [w for w in run["witnesses"] if w["name"] not in new]
    run["witnesses"][0].update(sd_floor_s=0.032, floor_df=24)
    del doc["speed"]["witness_every_cell"]
    doc["speed"]["witness_share"] = 0.25
    return doc


def derive(flags: list[str], *run_aa: Path, doc: dict | None = None) -> Profile:
    doc = profiles.llamacpp(doc if doc is not None else before_v7(), DIGESTS, FLAGS, flags,
                            run_aa)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    return load_profile(f.name)


def candidate_profile() -> Profile:
    return derive(["--depth-witnesses"])


def witnesses(p: Profile) -> dict[str, object]:
    return {w.name: w for r in p.runs for w in r.witnesses}


def test_the_candidate_witnesses_every_cell_with_its_own_shape() -> None:
    p, shipped = candidate_profile(), load_profile("llamacpp")
    assert p.speed.witness_every_cell
    assert [c for r in p.runs for c in r.cells] == [c for r in shipped.runs for c in r.cells]
    ws = {w.name: w for r in p.runs for w in r.witnesses}
    assert list(ws) == ["prefill-4k-decode-896", "decode-0", "prefill-4096-at-4096"]
    covered = {cell for w in ws.values() for cell in w.cells}
    assert covered == {f"{r.model}/{c.metric}@{c.ctx}" for r in p.runs for c in r.cells}
    d0, pf = ws["decode-0"], ws["prefill-4096-at-4096"]
    # decode@0: tg256 from an empty cache, the 1-id prompt at position 0, 255 fed steps
    assert d0.argv[1:] == ["witness", "{model}", "1", "255"]
    assert (d0.prompt_tokens, d0.steps, d0.output_tokens, d0.cells) == (1, 255, 256, {f"{M}/decode@0": 255})
    # prefill@4096: pp4096 on top of a 4096-id fill, one step
    assert pf.argv[1:] == ["witness", "{model}", "4096", "1", "4096"]
    assert (pf.prompt_tokens, pf.steps, pf.output_tokens) == (4096, 1, 2)
    assert pf.cells == {f"{M}/prefill@4096": 4096}
    for w in (d0, pf):
        assert (w.clock, w.output, w.looks) == ("handoff", {"kind": "step_lines"}, (3, 5, 8, 16))
        assert (w.sd_floor_s, w.floor_df) == (0.0, 0)  # unmeasured: no guessed floor
    # the shipped profile (version 7) is that candidate with 53L's floors: the same shapes, and
    # deriving it again from the shipped one adds nothing and keeps every floor
    assert {n: (w.argv, w.cells) for n, w in witnesses(shipped).items()} == \
        {n: (w.argv, w.cells) for n, w in ws.items()}  # type: ignore[attr-defined]
    again = witnesses(derive(["--depth-witnesses"], doc=yaml.safe_load(SHIPPED.read_text())))
    assert again == witnesses(shipped)


def test_the_contract_holds_the_new_shapes_to_their_work() -> None:
    """The spec's checks see the new witnesses' limits: decode@0 cannot credit the prompt's id
    as a fed step, prefill@4096 not more ids than its prompt, a step count not its outputs."""
    keys = {"decode@0", "decode@4096", "prefill@4096"}
    d0, pf = (dict(w) for w in llama_witnesses.DEPTH_WITNESSES)
    assert parse_witness(d0, "w", keys).steps == 255 and parse_witness(pf, "w", keys).steps == 1
    for bad in ({**d0, "cells": {"decode@0": 256}}, {**pf, "cells": {"prefill@4096": 4097}},
                {**pf, "output_tokens": 1}, {**d0, "cells": {"decode@8192": 255}}):
        with pytest.raises(ContractError):
            parse_witness(bad, "w", keys)


def test_the_run_s_a_a_sets_every_witness_s_floor(tmp_path: Path) -> None:
    """--calibrate-from-aa reads the run's witness A/A as `evalbot calibrate` does: here the
    shipped witness's 3 H200 pairs (sd of the saving, 2 df); witnesses it did not time stay
    unmeasured (a carried copy is read where this run's is absent); without either every floor is
    the shipped one or none."""
    results = json.loads(AA.read_text())
    aa = tmp_path / "aa.results.json"
    aa.write_text(json.dumps(results))
    floors = llama_witnesses.floors_of(results)
    assert set(floors) == {"prefill-4k-decode-896"} and floors["prefill-4k-decode-896"][1] == 3
    ws = witnesses(derive(["--depth-witnesses", "--calibrate-from-aa"], tmp_path / "not-run", aa))
    sd = floors["prefill-4k-decode-896"][0]
    assert ws["prefill-4k-decode-896"].sd_floor_s == round(sd, 4)  # type: ignore[attr-defined]
    assert ws["prefill-4k-decode-896"].floor_df == 2  # type: ignore[attr-defined]
    assert ws["decode-0"].sd_floor_s == 0.0  # type: ignore[attr-defined]
    none = witnesses(derive(["--depth-witnesses", "--calibrate-from-aa"], tmp_path / "absent.json"))
    assert none == witnesses(candidate_profile())


def test_a_new_witness_gets_main_s_seconds_as_its_work(tmp_path: Path) -> None:
    """work_s (what sizes a last look that must rule a 2% slowdown out) is the median of the
    A/A's verified seconds, for the new shapes; the shipped witness's span holds uncredited
    prefill work, so it stays without. Here the H200 witness's samples stand in for decode-0's."""
    results = json.loads(AA.read_text())
    [w] = [w for w in results["witnesses"] if w.get("source") == "witness"]
    w["name"] = "decode-0"
    w["samples"][0]["verified"] = False  # an unverified process's time is no measure of main's
    kept = sorted(s["seconds"] for s in w["samples"] if s.get("verified") and not s["dropped"])
    aa = tmp_path / "aa.results.json"
    aa.write_text(json.dumps(results))
    ws = witnesses(derive(["--depth-witnesses", "--calibrate-from-aa"], aa))
    d0 = ws["decode-0"]
    assert len(kept) == 5 and d0.work_s == round(kept[2], 4)  # type: ignore[attr-defined]
    assert d0.floor_df == 1  # the 2 pairs verified on both sides  # type: ignore[attr-defined]
    assert ws["prefill-4k-decode-896"].work_s == 0.0  # type: ignore[attr-defined]


def test_the_witness_a_a_runs_every_witness_16_pairs_on_a_cut_bench() -> None:
    p = derive(["--depth-witnesses", "--witness-aa"])
    [run] = p.runs
    cut = [run.argv[run.argv.index(f) + 1] for f in ("-p", "-n", "-r", "-d")]
    assert cut == ["512", "16", "1", "0,0,4096"]
    assert run.decode_tokens == 16 and [c.ctx for c in run.cells] == [0, 4096, 4096]
    box = BoxConfig(name="local", kind="local", workdir="/tmp/w", repo="", models_dir="/tmp/m",
                    trusted=True, python=sys.executable)
    job = calibration_job(p, load_labels(LABELS_FILE).policy("default"), box, "a" * 40,
                          llama_witnesses.AA_PAIRS, witnesses=True)
    ws = [w for r in job.runs for w in r.witnesses]
    assert [w.name for w in ws] == ["prefill-4k-decode-896", "decode-0", "prefill-4096-at-4096"]
    assert all(w.looks == (16,) and w.sd_floor_s == 0.0 for w in ws)
    assert job.rule.witness_aa


def test_run_53l_derives_each_profile_from_the_shipped_one(tmp_path: Path) -> None:
    _, cfg, _ = config(["plan", "53L", "--work", str(tmp_path / "w")])
    assert cfg is not None
    assert [e.name for e in cfg.evaluations] == ["llama-witness-aa", "llama-aa-53", "llama-hide-prefill"]
    argv = {e.name: profile_argv(cfg, e) for e in cfg.evaluations}
    calibration = argv["llama-witness-aa"]
    assert "--witness-aa" in calibration and "--calibrate-from-aa" not in calibration
    for name in ("llama-aa-53", "llama-hide-prefill"):
        assert {"--depth-witnesses", "--calibrate-from-aa"} <= set(argv[name])
        assert "--correctness" not in argv[name]  # speed only: no reference stage
    assert "reference" not in [s.name for s in cfg.plan()]
    assert "--correctness" in profile_argv(cfg, EVALUATIONS["llama-aa"])  # run 52 as before


def test_the_summary_reports_the_witness_a_a_s_floors(tmp_path: Path) -> None:
    e = EVALUATIONS["llama-witness-aa"]
    (tmp_path / e.name).mkdir()
    empty = summary.build(tmp_path, [e], {}, "53L")
    assert empty["evaluations"][0]["headline"] == "not run" and not empty["ok"]
    (tmp_path / e.name / "floors.json").write_text(json.dumps({"decode-0": [0.0042, 16]}))
    got = summary.build(tmp_path, [e], {}, "53L")
    assert got["ok"] and "witness decode-0 floor 0.0042 s over 16 pairs" in summary.markdown(got)


def test_a_candidate_witness_on_a_missing_cell_is_an_error() -> None:
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["speed"]["runs"][0]["cells"] = [c for c in doc["speed"]["runs"][0]["cells"] if c["ctx"] != 0]
    with pytest.raises(ValueError, match="decode-0: no cell decode@0"):
        llama_witnesses.with_depth_witnesses(doc)
