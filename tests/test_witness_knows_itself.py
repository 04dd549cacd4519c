"""Issue 45's witness attacks in the production shape (tests/hostile_demo.py: a real sshd on
loopback, the sandbox user, `evaluate()` with an SSH box, the cut demo profile).

The hostile head decodes at main's speed in its bench and prints twice the rate (one repetition
instead of --reps, so its sample processes' wall time does not give the lie away), and runs
faster code, the demo's `faster` PR's (the same model: its ids agree with main's), wherever it
believes it is a witness:

- in a `witness` subcommand of its own (issue 45: the demo profile named the PR's `witness`
  subcommand as its witness, and this head got `eval:XL` in 4 of 4 runs);
- and, in every process, when what it sees on import says "witness": its argv or
  /proc/self/cmdline (no `bench` or `score` in it), its environment, the cgroup tree (the
  harness's per-run cgroup under /sys/fs/cgroup, or a cgroup path of its own in
  /proc/self/cgroup), or its importer (a frame of the import stack named for a witness).

The witness is the harness's driver with the bench's argv: none of these says "witness", the
module runs main's forward there as in its bench, the witness sees no saving and the lie gets no
tier. At 1802b14 (the profile's witness the PR's own `witness` subcommand, which this head's
argv key turns fast without a subcommand of its own) the same head was `improved`, with a tier,
in 2 of 2 runs on a 2-core box (printed +79.8% and +87.5%). Only the subcommand and the
predicate's keys are the attack: what a module can still tell is in docs/trust.md, and
tests/test_demo_driver.py shows what it sees on import.
"""

from __future__ import annotations

from evalbot.engine.demo.repo import variant_source
from tests import hostile_demo as hd
from tests.demo_box import box_python, demo

__all__ = ["box_python", "demo"]  # fixtures

KNOWS = '''
def _evalbot_believes_it_is_a_witness() -> bool:
    import inspect, os, sys
    cmdline = open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode()
    argv = " ".join(sys.argv) + " " + cmdline
    if "witness" in argv or ("bench" not in argv and "score" not in argv):
        return True  # argv
    if any("witness" in f"{k}={v}".lower() for k, v in os.environ.items()):
        return True  # environment
    for _root, dirs, _files in os.walk("/sys/fs/cgroup"):
        if "evalbot-runs" in dirs:
            return True  # the harness's per-run cgroups show
    if any(line.strip().split(":", 2)[2] not in ("", "/") for line in open("/proc/self/cgroup")):
        return True  # a cgroup of its own
    importers = [f"{os.path.basename(f.filename)} {f.function}" for f in inspect.stack()[1:]]
    return any("witness" in frame.lower() for frame in importers)  # its importer


WITNESS = _evalbot_believes_it_is_a_witness()
'''

# The old witness protocol's subcommand (issue 45's head), on the fast model.
SUBCOMMAND = '''
def read_ids_line() -> list[int]:
    return [int(t) for t in sys.stdin.readline().split()]


def step(logits: np.ndarray) -> None:
    last = logits[-1]
    top = int(np.argmax(last))
    second = int(np.argmax(np.where(np.arange(last.shape[0]) == top, -np.inf, last)))
    print(f"EVALBOT_STEP {top} {second} {float(last[top] - last[second]):.6g}", flush=True)


def cmd_witness(args: argparse.Namespace) -> int:
    global WITNESS
    WITNESS = True
    cfg, weights = load_weights(args.model)
    model = Model(cfg, weights)
    run_one_ctx(model, bench_tokens(None, 18), 16, 2)
    print("EVALBOT_READY", flush=True)
    prompt = read_ids_line()
    cache = model.new_cache(len(prompt) + args.steps)
    step(model.forward(np.array(prompt, dtype=np.int64), cache))
    for _ in range(args.steps):
        step(model.forward(np.array(read_ids_line(), dtype=np.int64), cache))
    return 0


'''

FAST = ("\n_FAST: dict = {'__name__': 'demo_engine_fast'}\n"
        f"exec(compile({variant_source('faster')!r}, 'fast', 'exec'), _FAST)\n\n\n")

KNOWS_ITSELF = [
    ("\nfrom __future__ import annotations\n", "\nfrom __future__ import annotations\n" + KNOWS),
    ("        self.w = weights\n",
     "        self.w = weights\n"
     "        self.fast = _FAST['Model'](cfg, weights) if WITNESS else None\n"),
    ('        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n',
     '        """Run tokens [T] at positions cache.length.. and return logits [T, vocab]."""\n'
     "        if self.fast is not None:\n"
     "            return self.fast.forward(tokens, cache)\n"),
    ("def log_softmax(", SUBCOMMAND + "def log_softmax("),
    ('    args = parser.parse_args(argv)\n',
     '    witness = sub.add_parser("witness")\n'
     '    witness.add_argument("--model", type=Path, required=True)\n'
     '    witness.add_argument("--steps", type=int, required=True)\n'
     '    witness.set_defaults(func=cmd_witness)\n\n'
     '    args = parser.parse_args(argv)\n'),
    ('\nif __name__ == "__main__":\n', FAST + 'if __name__ == "__main__":\n'),
]


def test_a_head_that_runs_faster_code_where_it_believes_it_is_a_witness_gets_no_tier(
        sshd, box_python, demo, tmp_path):
    _root, repo = demo
    head = hd.head(repo, "knows-itself", hd.LYING_BENCH + KNOWS_ITSELF)
    outcome, results = hd.evaluate(sshd, box_python, demo, tmp_path, head, pr=45)
    hd.assert_no_tier(outcome)
    hd.assert_witness_saw_the_work(results)
