"""One run's plan: its stages in order (each skipped when a marker says it is done, or when the
budget left cannot start it), and the files under shared/ it needs, with their sizes, against the
64 MiB the device's copy of the tree may hold (the rest can be moved aside for the run)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpu_runner import llama_witnesses
from gpu_runner.catalogue import LLAMACPP, SPARKINFER, Evaluation

TREE_LIMIT = 64 * 2**20
# gpu_synth_qwen35.py --qwen36 at q4_k_m: 0.50 GB a layer, 0.75 GB besides (its 1- and 4-layer
# files); written under the run's work folder on the device, never carried or brought back
QWEN36_FULL_SIZE = ("the 40-layer Qwen3.6 file, ~21 GB of the device's disk: some 2-4 min to "
                    "write and hash")


@dataclass(frozen=True)
class Stage:
    name: str  # setup, box, model, reference, warm, eval:NAME
    min_s: int  # the budget left it needs to start
    what: str


def stages(evaluations: list[Evaluation], warm: bool) -> list[Stage]:
    correctness = any(e.correctness for e in evaluations)
    qwen36 = [f for f, on in (("the 4-layer Qwen3.6 file", any(e.qwen36 and not e.qwen36_full
                                                                for e in evaluations)),
                              (QWEN36_FULL_SIZE, any(e.qwen36_full for e in evaluations))) if on]
    out = [Stage("setup", 30, "the wheels into /tmp/site; the engine repository, every head a commit"),
           Stage("box", 30, "bubblewrap and sudo from shared/debs; `evalbot box init`; CUDA as the "
                            "sandbox user"),
           Stage("model", 60, "the synthetic model files"
                 + (f" (and {' and '.join(qwen36)})" if qwen36 else ""))]
    if correctness:
        out.append(Stage("reference", 60, "the carried CUDA reference unpacked and checked (else "
                                          "built); a probe"))
        if warm:
            out.append(Stage("warm", 120, "the reference's whole window grid scored once, timed"))
    for e in evaluations:
        kind = "sandbox A/B" if e.kind == "sandbox-ab" else f"{e.base} -> {e.head}"
        extras = [x for x, on in (("correctness", e.correctness), ("qwen3.6", e.qwen36),
                                  ("its 40 layers", e.qwen36_full), ("no witnesses", not e.witnesses),
                                  ("131072 run", e.long_run), (f"{e.alone} run alone", bool(e.alone)),
                                  (f"{e.pairs} pairs a run", e.pairs > 0)) if on]
        out.append(Stage(f"eval:{e.name}", 120, f"{kind}, want {e.expected}"
                         + (f" ({', '.join(extras)})" if extras else "") + f": {e.why}"))
    return out


CARRIED_REFERENCE = "llamacpp-reference.tar.xz"  # optional: without it the reference is built (~3.5 min)
# optional: an earlier run's llama.cpp witness A/A, the floors of a run that does not measure its own
CARRIED_WITNESS_AA = f"{llama_witnesses.AA_NAME}.results.json"  # profiles.py reads it
OPTIONAL = {CARRIED_REFERENCE, CARRIED_WITNESS_AA}


def shared_needs(engine: str, evaluations: list[Evaluation], synth: str) -> list[tuple[str, str]]:
    """(path under shared/, what it is for) for every file the run reads from shared/; all are
    needed but OPTIONAL's: the carried reference (its source, the pruned tarball, is always
    carried) and an earlier run's witness A/A (without it the floors are the profile's)."""
    needs = [("wheels", "evalbot's dependencies and gguf (setup)"),
             ("debs", "bubblewrap and sudo (box)")]
    correctness = any(e.correctness for e in evaluations)
    if engine == SPARKINFER:
        needs += [("sparkinfer-ba8add3.tar.gz", "the engine (setup)"),
                  ("ggml-vocab-qwen35.gguf", "the models' tokenizer (model)")]
        if synth == "random":
            needs.append(("synth_qwen35.py", "the random-weight Qwythos file (model)"))
        if correctness:
            needs += [(CARRIED_REFERENCE, "the carried CUDA reference (reference), else built"),
                      ("llama.cpp-pruned.tar.gz", "the reference's source: built where the carried build "
                                                  "is absent or fails")]
        if any(e.kind == "sandbox-ab" for e in evaluations):
            needs.append(("old_sandbox_exec.py", "the launcher before bubblewrap (sandbox A/B)"))
    elif engine == LLAMACPP:
        needs += [("llama.cpp-pruned.tar.gz", "the engine (setup); the reference's source"),
                  ("ggml-vocab-qwen2.gguf", "the model's tokenizer (model)"),
                  ("synth_gguf.py", "the synthetic Qwen3-0.6B-shaped file (model)")]
        if correctness:  # a speed-only run (53L) has no reference stage
            needs.append((CARRIED_REFERENCE, "the carried CUDA reference (reference), else built"))
        if any(e.calibrate_from_aa for e in evaluations) and not any(
                e.kind == "witness-aa" for e in evaluations):
            needs.append((CARRIED_WITNESS_AA, "an earlier run's witness A/A: the witness floors"))
    return needs


def size_of(path: Path) -> int | None:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.is_file() else None


def tree_bytes(root: Path) -> int | None:
    """What the device's copy holds besides shared/: the files git does not ignore."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    files = [root / p for p in listed.decode().split("\0") if p and not p.startswith("shared/")]
    return sum(f.stat().st_size for f in files if f.is_file())


def mib(n: int | None) -> str:
    return "missing" if n is None else f"{n / 2**20:.1f} MiB"


def shared_report(root: Path, shared: Path, needs: list[tuple[str, str]]) -> tuple[list[str], bool]:
    """The report, and whether the run can start: every file there, the whole within the limit."""
    lines, total, missing = ["shared/ files this run needs:"], 0, []
    for rel, why in needs:
        size = size_of(shared / rel)
        lines.append(f"  {rel:28s} {mib(size):>12s}  {why}")
        total += size or 0
        if size is None and rel not in OPTIONAL:
            missing.append(rel)
    tree = tree_bytes(root)
    over = total + (tree or 0) > TREE_LIMIT
    lines.append(f"  {'together':28s} {mib(total):>12s}; the tree besides shared/ {mib(tree)}; "
                 f"{mib(total + (tree or 0))} of {mib(TREE_LIMIT)}"
                 + (" (OVER the limit)" if over else ""))
    named = {r for r, _ in needs}
    spare = sorted(p.name for p in shared.iterdir() if p.name not in named) if shared.is_dir() else []
    if spare:
        lines.append("shared/ files this run does not read (move them aside): "
                     + ", ".join(f"{n} ({mib(size_of(shared / n))})" for n in spare))
    if missing:
        lines.append("MISSING under shared/: " + ", ".join(missing))
    elif size_of(shared / CARRIED_REFERENCE) is None and CARRIED_REFERENCE in {r for r, _ in needs}:
        lines.append(f"no {CARRIED_REFERENCE}: the reference stage builds it (~3.5 min of the budget)")
    return lines, not missing and not over
