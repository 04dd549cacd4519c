"""The score command of the llamacpp profile: the contract of engine/scoring/correctness.py on top of
`evalbot-topk score` (engine/llamacpp/topk.cpp).

    python engine/llamacpp/score.py (--bin TOOL | --reference KEY | --per-window TOOL) --model GGUF
                                    --tokens WINDOWS.json --topk K --out OUT.json
    python engine/llamacpp/score.py (--bin TOOL | --reference KEY) --model GGUF
                                    --text CORPUS.txt --out IDS.json

`--bin` is the engine side: the tool built with the side's own tree. `--reference KEY` is the
pinned llama.cpp: the build engine/llamacpp/reference_build.py left beside the model files
(MODELS_DIR/llamacpp-reference/KEY), whose manifest is checked by sha256 before use.
`--per-window` drives sparkinfer's qwen3_gguf_score, which takes one window per process.
`--bin` also drives evalbot's sparkinfer witness tool (engine/sparkinfer/witness.cpp `score`: the
same window file and output); `--split K` is passed to it as `--split=K` (a window scored from 0
is scored on the token path up to K, after a batched fill of its first K ids from K on).
The second form is the profile's tokenizer (correctness.tokenize_argv, normally `--reference`):
`evalbot-topk tokenize MODEL TEXT` prints the model's ids of the whole text (no BOS, special
tokens not parsed), written to OUT as one JSON list of ints.
Runs as a script from the harness copy (score_argv: `{harness}/engine/llamacpp/score.py`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the harness copy it sits in as a package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "engine.llamacpp"  # the relative imports below resolve against it

from ..measure.parsing import ParseError, read_score_lines  # noqa: E402
from .manifest import ManifestError, verified_tool  # noqa: E402


def read_tokens(doc: object) -> tuple[list[list[int]], list[int]]:
    """The harness's tokens file: a list of windows, or {"windows": [...], "score_from": [...]}
    when some window is scored only from a position on (long windows: the deep positions)."""
    if isinstance(doc, dict):
        windows, froms = doc.get("windows"), doc.get("score_from")
    else:
        windows, froms = doc, [0] * len(doc) if isinstance(doc, list) else None
    if not isinstance(windows, list) or not isinstance(froms, list) or \
            len(froms) != len(windows) or not all(isinstance(w, list) and len(w) >= 2 and
                                                  type(f) is int and 0 <= f < len(w) - 1
                                                  for w, f in zip(windows, froms, strict=False)):
        raise ValueError("tokens file must hold windows of at least 2 token ids, each scored "
                         "from a position before its last")
    return windows, froms


def write_windows(windows: list[list[int]], path: Path, froms: list[int] | None = None) -> None:
    """One line per window for evalbot-topk: `[@FROM ]id id ...`."""
    froms = froms or [0] * len(windows)
    read_tokens({"windows": windows, "score_from": froms})  # validates
    path.write_text("".join((f"@{f} " if f else "") + " ".join(str(int(t)) for t in w) + "\n"
                            for w, f in zip(windows, froms, strict=True)))


def score(tool: Path, model: str, windows: list[list[int]], topk: int,
          scratch: Path, froms: list[int] | None = None,
          extra: list[str] | None = None) -> list[dict[str, object]]:
    froms = froms or [0] * len(windows)
    txt = scratch.with_suffix(".windows.txt")
    write_windows(windows, txt, froms)
    done = subprocess.run([str(tool), "score", model, str(topk), str(txt), *(extra or [])],
                          capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise RuntimeError(f"{tool.name} exited {done.returncode}")
    out = read_score_lines(done.stdout, topk)
    if len(out) != len(windows):
        raise ParseError(f"{len(out)} windows scored, {len(windows)} asked")
    for k, (got, w, f) in enumerate(zip(out, windows, froms, strict=True)):
        if len(got["top"]) != len(w) - 1 - f:
            raise ParseError(f"window {k}: {len(got['top'])} positions, "
                             f"{len(w) - 1 - f} asked")
    return out


def score_per_window(tool: Path, model: str, windows: list[list[int]],
                     topk: int, froms: list[int] | None = None) -> list[dict[str, object]]:
    """sparkinfer's `qwen3_gguf_score MODEL TOPK ID0 ID1 ...`: one process per window; its
    summary lines (PPL, ARGMATCH) must be there too, or the output is taken as truncated. The
    tool scores every position; a window scored from f on keeps positions f.. only."""
    out = []
    froms = froms or [0] * len(windows)
    for k, window in enumerate(windows):
        done = subprocess.run([str(tool), model, str(topk), *(str(int(t)) for t in window)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            raise RuntimeError(f"{tool.name} exited {done.returncode} on window {k}")
        summary = {ln.split()[0] for ln in done.stdout.splitlines() if ln.strip()}
        if not {"PPL", "ARGMATCH"} <= summary:
            raise ParseError(f"window {k}: no PPL/ARGMATCH summary line (truncated output)")
        got = read_score_lines(done.stdout, topk)[0]
        if len(got["top"]) != len(window) - 1:
            raise ParseError(f"window {k}: {len(got['top'])} positions, {len(window) - 1} asked")
        out.append({key: value[froms[k]:] for key, value in got.items()})
    return out


def tokenize(tool: Path, model: str, text: Path) -> list[int]:
    done = subprocess.run([str(tool), "tokenize", model, str(text)], capture_output=True,
                          text=True, check=False)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise RuntimeError(f"{tool.name} tokenize exited {done.returncode}")
    words = done.stdout.split()
    if not words or not all(w.isdigit() for w in words):
        raise ParseError(f"{tool.name} tokenize printed no ids or a non-id: {done.stdout[:200]!r}")
    return [int(w) for w in words]


def _tool(a: argparse.Namespace) -> Path:
    """The side's own evalbot-topk, or the pinned reference build re-verified by its manifest."""
    return a.bin or verified_tool(Path(a.model).parent / "llamacpp-reference" / a.reference)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="engine/llamacpp/score.py")
    side = ap.add_mutually_exclusive_group(required=True)
    side.add_argument("--bin", type=Path)
    side.add_argument("--reference")
    side.add_argument("--per-window", type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=Path)
    ap.add_argument("--topk", type=int)
    ap.add_argument("--text", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--split", type=int, help="--bin: passed as --split=K (sparkinfer's witness tool)")
    a = ap.parse_args(argv)
    if a.split is not None and (not a.bin or a.split < 1):
        ap.error("--split K (K >= 1) goes with --bin (evalbot's sparkinfer witness tool)")
    if (a.text is None) == (a.tokens is None) or (a.tokens and a.topk is None) or \
            (a.text and a.per_window):
        ap.error("either --tokens and --topk (score), or --text with --bin/--reference (tokenize)")
    try:
        if a.text:
            a.out.write_text(json.dumps(tokenize(_tool(a), a.model, a.text)))
            return 0
        windows, froms = read_tokens(json.loads(a.tokens.read_text()))
        if a.per_window:
            result = score_per_window(a.per_window, a.model, windows, a.topk, froms)
        else:
            extra = [f"--split={a.split}"] if a.split is not None else []
            result = score(_tool(a), a.model, windows, a.topk, a.out, froms, extra)
    except (ManifestError, ParseError, RuntimeError, ValueError, OSError) as exc:
        print(f"score failed: {exc}", file=sys.stderr)
        return 1
    a.out.write_text(json.dumps({"windows": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
