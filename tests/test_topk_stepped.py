"""evalbot-topk's witness on the stepped handoff protocol (engine/llamacpp/topk.cpp).

`evalbot-topk witness MODEL N_PREFILL N_STEPS` prints EVALBOT_READY, reads the prompt as one line
(one batch), then one id per line, each written only after the previous EVALBOT_STEP line was
read: N_STEPS + 1 STEP lines. CI does not build llama.cpp, so the real tool's transcript, recorded
on a CPU with `drive` below, is a fixture: its shape must be the protocol's, and its STEP ids must
equal what the file mode (`decode MODEL N_PREFILL IDS.txt`, also recorded) printed for the same
ids. With a built tool and a model in the environment, the same driver runs the real binary:

    EVALBOT_TOPK_BIN=.../evalbot-out/evalbot-topk EVALBOT_TOPK_MODEL=.../model.gguf \\
        .venv/bin/python -m pytest tests/test_topk_stepped.py -q -n 0

and `python tests/test_topk_stepped.py --record` (same environment) re-records the fixtures.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from evalbot.engine.contract.witness_spec import READY, STEP
from evalbot.engine.measure.witness import handoff_of
from evalbot.engine.measure.witness_output import read_output_ids
from evalbot.evaluation.profile import load_profile

DATA = Path(__file__).resolve().parent / "data" / "llamacpp"
STEPPED = DATA / "topk-cpu-tiny-stepped.txt"
FILE_MODE = DATA / "topk-cpu-tiny-decode.txt"
BIN = os.environ.get("EVALBOT_TOPK_BIN", "")
MODEL = os.environ.get("EVALBOT_TOPK_MODEL", "")
LIVE = pytest.mark.skipif(
    not (BIN and Path(BIN).is_file() and MODEL and Path(MODEL).is_file()),
    reason="needs a built evalbot-topk and a GGUF: set EVALBOT_TOPK_BIN=<tree>/evalbot-out/"
           "evalbot-topk (python -m engine.llamacpp.build --backend cpu) and EVALBOT_TOPK_MODEL="
           "<model.gguf> (e.g. shared/tools/synth_gguf.py ggml-vocab-qwen2.gguf OUT --layers 1 "
           "--embd 64 --ff 128 --heads 2 --kv 1 --hd 32)")


@dataclass
class Transcript:
    """One witness process as the driver saw it: its lines in order ('<' printed, '>' written)."""

    lines: list[tuple[str, str]] = field(default_factory=list)
    returncode: int | None = None
    stderr: str = ""

    def printed(self) -> list[str]:
        return [text for way, text in self.lines if way == "<"]

    def written(self) -> list[str]:
        return [text for way, text in self.lines if way == ">"]

    def step_ids(self) -> list[int]:
        # the id, then (since near ties) the runner-up and margin; recordings before: the id alone
        return [int(t[len(STEP):].split()[0]) for t in self.printed() if t.startswith(STEP)]


def drive(argv: list[str], feed: list[str], timeout_s: float = 120.0) -> Transcript:
    """Run argv as the harness does: wait for READY, then write each line of `feed` only after
    reading the tool's answer to the one before (the first, the prompt, right after READY);
    close stdin once `feed` is spent and the last answer read. A tool that exits early ends it."""
    out = Transcript()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                text=True, bufsize=1)
        killer = threading.Timer(timeout_s, proc.kill)  # a hung tool fails the test, not CI
        killer.start()
        try:
            _converse(proc, feed, out)
        finally:
            killer.cancel()
            for pipe in (proc.stdin, proc.stdout):
                if pipe and not pipe.closed:
                    try:
                        pipe.close()
                    except BrokenPipeError:  # the tool exited before reading what was written
                        pass
            out.returncode = proc.wait()
            err.seek(0)
            out.stderr = err.read().decode(errors="replace")
    return out


def _converse(proc: subprocess.Popen[str], feed: list[str], out: Transcript) -> None:
    assert proc.stdin and proc.stdout
    if not _read(proc, out) or out.printed()[-1] != READY:
        return
    for line in feed:
        out.lines.append((">", line))
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return
        if not _read(proc, out):
            return


def _read(proc: subprocess.Popen[str], out: Transcript) -> bool:
    assert proc.stdout
    line = proc.stdout.readline()
    if not line:
        return False
    out.lines.append(("<", line.rstrip("\n")))
    return True


def witness_argv(bin_path: str, model: str, n_prefill: int, n_steps: int) -> list[str]:
    return [bin_path, "witness", model, str(n_prefill), str(n_steps)]


def run_witness(bin_path: str, model: str, prompt: list[int], steps: list[int]) -> Transcript:
    feed = [" ".join(map(str, prompt))] + [str(i) for i in steps]
    return drive(witness_argv(bin_path, model, len(prompt), len(steps)), feed)


def vocab_size(bin_path: str, model: str) -> int:
    """The vocabulary as the tool sees it: from its message refusing an id beyond any."""
    t = drive(witness_argv(bin_path, model, 1, 1), ["999999999"])
    return int(t.stderr.split("is not an id in [0, ")[1].split(")")[0])


def file_mode(bin_path: str, model: str, n_prefill: int, ids: list[int]) -> list[int]:
    """The argmaxes `decode MODEL N_PREFILL IDS.txt` prints, one per decode step."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(" ".join(map(str, ids)) + "\n")
        f.flush()
        done = subprocess.run([bin_path, "decode", model, str(n_prefill), f.name],
                              capture_output=True, text=True, timeout=120, check=True)
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("OUTPUT_IDS:")]
    return [int(t) for t in line.split()[1:]]


# --- the recorded fixtures -------------------------------------------------------------------


def read_fixture(path: Path) -> tuple[dict[str, str], Transcript]:
    """`# key: value` header lines, then the transcript's `< ` and `> ` lines."""
    meta: dict[str, str] = {}
    out = Transcript()
    for line in path.read_text().splitlines():
        if line.startswith("# ") and ": " in line:
            key, _, value = line[2:].partition(": ")
            meta.setdefault(key.strip(), value.strip())
        elif line[:2] in ("< ", "> "):
            out.lines.append((line[0], line[2:]))
    return meta, out


def test_the_recorded_transcript_is_the_stepped_protocol() -> None:
    meta, t = read_fixture(STEPPED)
    n_prefill, n_steps, n_vocab = (int(meta[k]) for k in ("n_prefill", "n_steps", "n_vocab"))
    assert meta["argv"] == f"evalbot-topk witness MODEL {n_prefill} {n_steps}"
    # READY, the prompt, then each STEP line answered by one id, the last left unanswered
    assert t.lines[0] == ("<", READY)
    ways = "".join(way for way, _ in t.lines[1:])
    assert ways == "><" * (n_steps + 1)
    assert all(text.startswith(STEP) for text in t.printed()[1:])
    prompt, *steps = t.written()
    assert len(prompt.split()) == n_prefill and all(len(s.split()) == 1 for s in steps)
    ids = [int(i) for i in prompt.split()] + [int(s) for s in steps]
    assert len(ids) == n_prefill + n_steps and all(0 <= i < n_vocab for i in ids)
    out = t.step_ids()
    assert len(out) == n_steps + 1 and all(0 <= i < n_vocab for i in out)
    # random weights, random ids: a tool that printed one id throughout did not decode anything
    assert len(set(out)) > 1


def test_the_file_mode_printed_the_same_argmaxes_for_the_same_ids() -> None:
    """The stepped STEP ids after each fed id equal the file mode's, recorded from the same
    binary and model; the first STEP (after the prompt) the file mode does not print."""
    meta, stepped = read_fixture(STEPPED)
    fmeta, decoded = read_fixture(FILE_MODE)
    assert fmeta["model_sha256"] == meta["model_sha256"]
    assert fmeta["argv"] == f"evalbot-topk decode MODEL {meta['n_prefill']} IDS.txt"
    (ids_line,) = decoded.written()
    assert ids_line == " ".join(stepped.written())  # the prompt's ids, then each step's
    (out_line,) = decoded.printed()
    assert out_line.startswith("OUTPUT_IDS: ")
    assert [int(t) for t in out_line.split()[1:]] == stepped.step_ids()[1:]


def test_the_shipped_profile_runs_the_witness_mode() -> None:
    """Each of the llamacpp profile's witnesses is this tool's `witness MODEL N_PREFILL N_STEPS
    [N_FILL]` with the spec's own prompt_tokens and steps, read as the tool prints: steps + 1
    STEP lines (a fill only where the cell's depth is past the prompt: prefill@4096)."""
    specs = [w for r in load_profile("llamacpp").runs for w in r.witnesses]
    fills = {"prefill-4096-at-4096": ["4096"]}
    assert len(specs) == 3
    for spec in specs:
        assert spec.argv == ["{build}/evalbot-out/evalbot-topk", "witness", "{model}",
                             str(spec.prompt_tokens), str(spec.steps), *fills.get(spec.name, [])]
        assert spec.clock == "handoff" and spec.output == {"kind": "step_lines"}
        assert spec.output_tokens == spec.steps + 1


def test_the_harness_feeds_and_reads_what_the_tool_recorded() -> None:
    """engine.measure.witness's handoff for the fixture's ids is the driver's, line for line,
    and its reader takes the recorded output as the spec's complete output."""
    meta, t = read_fixture(STEPPED)
    n_prefill, n_steps = int(meta["n_prefill"]), int(meta["n_steps"])
    [shipped] = [w for r in load_profile("llamacpp").runs for w in r.witnesses
                 if w.name == "prefill-4k-decode-896"]
    spec = replace(shipped, argv=witness_argv("evalbot-topk", "MODEL", n_prefill, n_steps),
                   prompt_tokens=n_prefill, steps=n_steps, output_tokens=n_steps + 1)
    prompt, *steps = t.written()
    handoff = handoff_of(spec, [int(i) for i in prompt.split()] + [int(i) for i in steps])
    assert handoff is not None
    assert (handoff.ready, handoff.prefix) == (READY.encode(), STEP.encode())
    assert handoff.prompt == f"{prompt}\n".encode()
    assert handoff.steps == tuple(f"{i}\n".encode() for i in steps)
    ids = read_output_ids("\n".join(t.printed()) + "\n", spec.output)
    assert ids == t.step_ids() and len(ids) == spec.output_tokens


def test_the_driver_writes_each_id_only_after_the_step_before(tmp_path: Path) -> None:
    """A stand-in tool replays the recorded transcript and fails on any line written out of
    turn or different from the recording: the driver is the protocol the fixture records."""
    _, t = read_fixture(STEPPED)
    script = tmp_path / "replay.py"
    script.write_text(
        "import sys\n"
        f"lines = {t.lines!r}\n"
        "for way, text in lines:\n"
        "    if way == '<':\n"
        "        print(text, flush=True)\n"
        "    elif sys.stdin.readline().rstrip('\\n') != text:\n"
        "        sys.exit('[FAIL] out of turn')\n"
        "sys.exit(1 if sys.stdin.readline() else 0)\n")
    got = drive([sys.executable, str(script)], t.written(), timeout_s=60)
    assert (got.returncode, got.stderr) == (0, "")
    assert got.lines == t.lines


# --- the real binary (EVALBOT_TOPK_BIN, EVALBOT_TOPK_MODEL) ------------------------------------


@LIVE
def test_live_steps_agree_with_the_file_mode() -> None:
    rng = random.SystemRandom()
    n_prefill, n_steps = 32, 64
    ids = [rng.randrange(1000) for _ in range(n_prefill + n_steps)]  # the harness's id_range
    t = run_witness(BIN, MODEL, ids[:n_prefill], ids[n_prefill:])
    assert t.returncode == 0, t.stderr
    assert "[FAIL]" not in t.stderr
    out = t.step_ids()
    assert len(out) == n_steps + 1
    assert out[1:] == file_mode(BIN, MODEL, n_prefill, ids)


@LIVE
def test_live_replays_the_recorded_transcript() -> None:
    meta, rec = read_fixture(STEPPED)
    if hashlib.sha256(Path(MODEL).read_bytes()).hexdigest() != meta["model_sha256"]:
        pytest.skip(f"EVALBOT_TOPK_MODEL is not the fixture's model ({meta['model']})")
    prompt, *steps = rec.written()
    t = run_witness(BIN, MODEL, [int(i) for i in prompt.split()], [int(s) for s in steps])
    assert t.returncode == 0, t.stderr
    assert t.lines == rec.lines


MALFORMED = {  # feed for `witness MODEL 8 3` -> the [FAIL] line expected on stderr
    "short prompt": (["1 2 3 4 5 6 7"], "[FAIL] prompt: 7 id(s) on the line, expected 8"),
    "long prompt": (["1 2 3 4 5 6 7 8 9"], "[FAIL] prompt: 9 id(s) on the line, expected 8"),
    "two ids a step": (["1 2 3 4 5 6 7 8", "5 6"],
                       "[FAIL] step 1 of 3: 2 id(s) on the line, expected 1"),
    "empty step": (["1 2 3 4 5 6 7 8", ""], "[FAIL] step 1 of 3: 0 id(s) on the line"),
    "out of vocab": (["1 2 3 4 5 6 7 8", "9", "999999999"],
                     "[FAIL] step 2 of 3: '999999999' is not an id in [0, "),
    "negative": (["1 2 3 4 5 6 7 8", "-1"], "[FAIL] step 1 of 3: '-1' is not an id"),
    "not a number": (["1 2 3 x4 5 6 7 8"], "[FAIL] prompt: 'x4' is not an id"),
    "EOF early": (["1 2 3 4 5 6 7 8", "9", "10"], "[FAIL] step 3 of 3: EOF"),
    "after the last": (["1 2 3 4 5 6 7 8", "9", "10", "11", "12"],
                       "[FAIL] input after the last of 3 steps"),
}


@LIVE
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_live_a_malformed_line_fails_clearly(case: str) -> None:
    feed, message = MALFORMED[case]
    t = drive(witness_argv(BIN, MODEL, 8, 3), feed)
    assert t.returncode == 2 and message in t.stderr, (t.returncode, t.stderr)
    assert t.printed()[0] == READY


@LIVE
def test_live_the_vocabulary_bounds_an_id() -> None:
    n_vocab = vocab_size(BIN, MODEL)
    last = drive(witness_argv(BIN, MODEL, 2, 1), [f"0 {n_vocab - 1}", str(n_vocab - 1)])
    assert last.returncode == 0 and len(last.step_ids()) == 2, last.stderr
    over = drive(witness_argv(BIN, MODEL, 2, 1), ["0 1", str(n_vocab)])
    assert over.returncode == 2
    assert f"[FAIL] step 1 of 1: '{n_vocab}' is not an id in [0, {n_vocab})" in over.stderr


@LIVE
def test_live_the_old_stdin_mode_is_gone() -> None:
    done = subprocess.run([BIN, "decode", MODEL, "8", "-", "12"], capture_output=True, text=True,
                          input="1 2 3 4 5 6 7 8 9 10 11 12\n", timeout=60)
    assert done.returncode == 64 and "witness MODEL N_PREFILL N_STEPS" in done.stderr
    done = subprocess.run([BIN, "witness", MODEL, "8", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "[FAIL] N_PREFILL >= 1 and N_STEPS >= 1" in done.stderr


# --- recording -------------------------------------------------------------------------------


def record(n_prefill: int = 32, n_steps: int = 64, seed: int = 20260) -> None:
    """Write both fixtures from EVALBOT_TOPK_BIN and EVALBOT_TOPK_MODEL (ids drawn as the
    harness draws them, from [0, 1000), seeded so a re-recording feeds the same ids)."""
    rng = random.Random(seed)
    ids = [rng.randrange(1000) for _ in range(n_prefill + n_steps)]
    t = run_witness(BIN, MODEL, ids[:n_prefill], ids[n_prefill:])
    if t.returncode != 0 or len(t.step_ids()) != n_steps + 1:
        raise SystemExit(f"witness failed: {t.returncode} {t.stderr}")
    decoded = file_mode(BIN, MODEL, n_prefill, ids)
    head = [
        f"# model: {os.path.basename(MODEL)}",
        f"# model_sha256: {hashlib.sha256(Path(MODEL).read_bytes()).hexdigest()}",
        f"# n_prefill: {n_prefill}",
        f"# n_steps: {n_steps}",
        f"# n_vocab: {vocab_size(BIN, MODEL)}",
        f"# ids: random.Random({seed}).randrange(1000), {n_prefill} + {n_steps} of them",
    ]
    with open(STEPPED, "w") as f:
        f.write(PROVENANCE.format(what="stepped witness transcript") + "\n".join(head) + "\n"
                f"# argv: evalbot-topk witness MODEL {n_prefill} {n_steps}\n"
                "# '<' the tool printed, '>' the driver wrote (each after the '<' line above it)\n")
        f.writelines(f"{way} {text}\n" for way, text in t.lines)
    with open(FILE_MODE, "w") as f:
        f.write(PROVENANCE.format(what="file-mode run over the stepped transcript's ids")
                + "\n".join(head) + "\n"
                f"# argv: evalbot-topk decode MODEL {n_prefill} IDS.txt\n"
                "# '>' IDS.txt's one line, '<' the tool's stdout\n"
                f"> {' '.join(map(str, ids))}\n< OUTPUT_IDS: {' '.join(map(str, decoded))}\n")


PROVENANCE = """\
# evalbot-topk {what}: the real tool, recorded on a 2-core x86-64 CPU.
# engine/llamacpp/topk.cpp (g++ -std=c++17 -O3, linked static) against libllama of
# llama-cpp-python 0.3.36's vendor/llama.cpp (cmake Release, CPU only: GGML_CUDA=OFF,
# GGML_NATIVE=OFF, static); the model a random-weight qwen3 by shared/tools/synth_gguf.py
# vendor/llama.cpp/models/ggml-vocab-qwen2.gguf OUT --layers 1 --embd 64 --ff 128 --heads 2 --kv 1
# --hd 32 --seed 0; written by `python tests/test_topk_stepped.py --record` (EVALBOT_TOPK_BIN and
# EVALBOT_TOPK_MODEL set), the driver the tests use.
"""


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"] or not (BIN and MODEL):
        raise SystemExit("usage: EVALBOT_TOPK_BIN=... EVALBOT_TOPK_MODEL=... "
                         "python tests/test_topk_stepped.py --record")
    record()
