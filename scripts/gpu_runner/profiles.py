"""The e2e profiles: the shipped profile with only what the device needs changed.

sparkinfer: the synthetic files and their pins (the Qwythos file; the 4-layer qwen35moe file in the
  Qwen3.6 model's place with `qwen36`, the 40-layer one, the real shape, with `qwen36-full` too,
  else that model, its run and its guard are removed), the
  131072 run only with `long_run` (alone with `long-alone`: Qwythos's sweep and its witnesses out;
  `qwen36-alone`: Qwen3.6's run alone), `pairs=N`: speed.looks [N] (every run measures N kept pairs,
  a floor's samples), `no-witnesses`: every run's witnesses removed (its samples alone), the
  correctness section only with `correctness` (the reference
  built from the tarball, KEY), its floors the shipped ones on the stable file (the policy's) and
  calibrated from main on the random-weight file (phase 2's A/A, tests/data/sparkinfer/), and the
  box's environment (NAME=VALUE: LD_LIBRARY_PATH where libcuda is not on the loader's path).
llamacpp: the synthetic Qwen3-0.6B-shaped file and its pin, the build flags of the reference
  (flash attention off, chain.build_flags), and the box's environment; the correctness section
  only with `correctness`; with `depth-witnesses` issue 53's candidate (llama_witnesses.py: a
  witness for decode@0 and for prefill@4096, every cell witnessed), with `witness-aa` the
  calibration's cut llama-bench, with `calibrate-from-aa` every witness's floor from this run's
  witness A/A (eval/llama-witness-aa.results.json), else from the copy an earlier session's
  run-53L.tgz brought back and the lead put in shared/ (same name), else none.

    python3 -m gpu_runner.profiles sparkinfer SHIPPED MODELS.sha256 KEY [--correctness] [--qwen36]
        [--qwen36-full] [--long-run] [--stable] [--speed-cut] [--calibrate-from-aa]
        [--long-alone|--qwen36-alone] [--pairs=N] [--no-witnesses] [NAME=VALUE ...] > P.yaml
    python3 -m gpu_runner.profiles llamacpp SHIPPED MODELS.sha256 BUILD_FLAGS [--correctness]
        [--depth-witnesses] [--witness-aa] [--calibrate-from-aa] [NAME=VALUE ...] > P.yaml
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from gpu_runner import llama_witnesses

ROOT = Path(__file__).resolve().parents[2]
PHASE2_AA = ROOT / "tests/data/sparkinfer/phase2-aa-correctness-h200.json"
SPK_FILES = {"qwythos-9b": "qwythos-synth.gguf", "qwen3.6-35b-a3b": "qwen36-synth-4l.gguf"}
QWEN36_FULL = {"qwen3.6-35b-a3b": "qwen36-synth.gguf"}  # --qwen36-full: 40 layers (gpu_stages.sh)
LLAMA_FILE = "qwen3-0p6b-synth-f16.gguf"


def calibrated_floors(aa: Path = PHASE2_AA) -> dict[str, float]:
    """The floors both models of an A/A's results clear: main's lowest top-1 bound, twice main's
    highest KL bound (a random-weight model's next token is nearly flat: main agrees with
    llama.cpp in distribution, KL < 0.001, and not in argmax, top-1 0.057)."""
    sys.path.insert(0, str(ROOT))
    from evalbot.config.resources import LABELS_FILE
    from evalbot.grading.correctness_policy import calibrate_floors
    from evalbot.grading.policy import load_labels

    results = json.loads(aa.read_text())
    policy = load_labels(LABELS_FILE).policy("default").correctness
    per_model = [calibrate_floors([s], policy)
                 for s in [results["correctness"], *(results.get("correctness_guards") or [])]]
    return {"top1": min(f["top1"] for f in per_model),
            "kl": round(2 * max(f["kl"] for f in per_model), 4)}


def digests_of(sums: Path) -> dict[str, str]:
    return {name: digest for digest, name in (line.split() for line in sums.read_text().splitlines()
                                              if line.strip())}


def is_long(run: dict) -> bool:
    """The 131072 run (its cells at that context; the shipped profile's second Qwythos run)."""
    return any(c["ctx"] == 131072 for c in run["cells"])


def sparkinfer(doc: dict, digests: dict[str, str], key: str, flags: list[str],
               run_aa: Path | None = None) -> dict:
    qwen36, stable = "--qwen36" in flags, "--stable" in flags
    doc["name"] = "sparkinfer-e2e"
    doc["env"].update(dict(f.split("=", 1) for f in flags if "=" in f and not f.startswith("--")))
    doc["models"] = [m for m in doc["models"] if (qwen36 or m["name"] == "qwythos-9b") and not (
        "--qwen36-alone" in flags and m["name"] == "qwythos-9b")]
    files = {**SPK_FILES, **(QWEN36_FULL if "--qwen36-full" in flags else {})}
    for m in doc["models"]:
        m["file"], m["sha256"] = files[m["name"]], digests[files[m["name"]]]
    names = {m["name"] for m in doc["models"]}
    doc["speed"]["runs"] = [r for r in doc["speed"]["runs"] if r["model"] in names and (
        "--long-run" in flags or not is_long(r)) and ("--long-alone" not in flags or is_long(r))]
    for f in flags:
        if f.startswith("--pairs="):  # one look at N pairs: no run stops before N
            doc["speed"]["looks"] = [int(f.split("=", 1)[1])]
    if "--no-witnesses" in flags:  # device time: the runs' samples alone
        for r in doc["speed"]["runs"]:
            r.pop("witnesses", None)
    if "--speed-cut" in flags:  # a correctness run: the sweep cut to its cells up to 4096
        for r in doc["speed"]["runs"]:
            r["cells"] = [c for c in r["cells"] if c["ctx"] <= 4096]
            r["witnesses"] = [w for w in r.get("witnesses", []) if all(
                int(cell.split("@")[1]) <= 4096 for cell in w["cells"])]
    corr = doc.get("correctness")
    if "--correctness" not in flags or corr is None:
        doc.pop("correctness", None)
        return doc
    corr["guards"] = [g for g in corr.get("guards", []) if g in names]
    if not corr["guards"]:
        corr.pop("guards")
    for argv in ("reference_argv", "tokenize_argv"):
        corr[argv] = [key if a.startswith("git-") else a for a in corr[argv]]
    if stable and run_aa is not None and run_aa.is_file():
        # the run's later evaluations: floors calibrated from its own A/A, as `evalbot calibrate`
        # stores them (on the H100 main sat at 0.78 top-1, under the policy's 0.90)
        corr["floors"] = calibrated_floors(run_aa)
        print(f"floors calibrated from this run's A/A: {corr['floors']}", file=sys.stderr)
    elif stable:  # a file main and the reference agree on: the shipped floors (none: the policy's)
        corr.pop("floors", None)
    else:
        corr["floors"] = calibrated_floors()
    return doc


def llamacpp(doc: dict, digests: dict[str, str], build_flags: str, flags: list[str],
             run_aa: tuple[Path, ...] = ()) -> dict:
    doc["name"] = "llamacpp-e2e"
    doc.setdefault("env", {}).update(dict(f.split("=", 1) for f in flags if "=" in f))
    doc["build"]["argv"] = ["{python}", "{harness}/engine/llamacpp/build.py", "--tree", "{tree}",
                            *build_flags.split()]
    doc["models"][0].update(file=LLAMA_FILE, sha256=digests[LLAMA_FILE])
    if "--correctness" not in flags:
        doc.pop("correctness", None)
    if "--witness-aa" in flags:
        llama_witnesses.for_witness_aa(doc)
    if "--depth-witnesses" in flags:  # with_floors says which floors are measured and which not
        llama_witnesses.with_depth_witnesses(doc)
        results = llama_witnesses.results_of(*run_aa) or {}
        llama_witnesses.with_floors(doc, llama_witnesses.floors_of(results) if results else {},
                                    llama_witnesses.work_of(results))
    return doc


def main() -> int:
    engine, shipped, sums, *rest = sys.argv[1:]
    doc, digests = yaml.safe_load(Path(shipped).read_text()), digests_of(Path(sums))
    if engine == "sparkinfer":
        aa = Path(sums).parent.parent / "eval" / "aa.results.json"  # this run's A/A, if it has one
        out = sparkinfer(doc, digests, rest[0], rest[1:], aa if "--calibrate-from-aa" in rest else None)
    elif engine == "llamacpp":  # this run's witness A/A, else one carried in shared/
        name = f"{llama_witnesses.AA_NAME}.results.json"
        aa = (Path(sums).parent.parent / "eval" / name, ROOT / "shared" / name)
        out = llamacpp(doc, digests, rest[0], rest[1:], aa if "--calibrate-from-aa" in rest else ())
    else:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump(out, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
