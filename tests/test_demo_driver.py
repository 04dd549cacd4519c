"""The demo's harness-owned witness (engine/demo/driver.py) as the shipped profile runs it: real
processes through engine.sandbox.proc.run, the witness fed by the handoff, the bench's argv.

- it answers with the argmax of the build's own `Model.forward`, step by step;
- it runs no command of the engine: a module whose `main` and every subcommand would say so;
- the module sees the same process in a bench and in a witness: a module that records, when it
  is imported, everything a head could key on (argv, /proc/self/cmdline, environment, its name,
  its importer, the import stack, sys.path, its cgroup) records the same thing in both, but for
  its stdin (docs/trust.md lists that tell and the others a module can still use).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalbot.engine.demo import DemoRepo, generate
from evalbot.engine.harness.steps import HARNESS_ROOT
from evalbot.engine.measure import witness
from evalbot.engine.measure.witness_output import read_steps
from evalbot.engine.sandbox import proc
from evalbot.evaluation.profile import load_profile

PROFILE = load_profile("demo")
[RUN] = PROFILE.runs
SPEC = next(w for w in RUN.witnesses if w.name == "decode-64")  # the stepped decode witness


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRepo:
    repo = generate(tmp_path_factory.mktemp("demo"))
    subprocess.run([sys.executable, "build.py"], cwd=repo.path, check=True, capture_output=True)
    return repo


def _argv(engine: Path, model: Path, argv: tuple[str, ...] | list[str]) -> list[str]:
    """A profile argv filled as engine/measure/speed.py fills it; the engine file as given."""
    filled = [a.format(python=sys.executable, harness=str(HARNESS_ROOT),
                       build=str(engine.parent.parent), model=str(model), ctxs="64",
                       tokens=str(engine.parent / "tokens.json")) for a in argv]
    return [str(engine) if a.endswith("build/demo_engine.py") else a for a in filled]


def _witness(tmp_path: Path, engine: Path, model: Path, ids: list[int]) -> proc.Finished:
    return proc.run(_argv(engine, model, SPEC.argv), cwd=engine.parent, timeout_s=120,
                    log=tmp_path / "witness.log", trusted=True, env=PROFILE.env,
                    handoff=witness.handoff_of(SPEC, ids))


def _bench(tmp_path: Path, engine: Path, model: Path) -> proc.Finished:
    (engine.parent / "tokens.json").write_text(json.dumps(list(range(200))))
    return proc.run(_argv(engine, model, RUN.argv), cwd=engine.parent, timeout_s=120,
                    log=tmp_path / "bench.log", trusted=True, env=PROFILE.env)


def _forward_argmaxes(engine: Path, model: Path, ids: list[int]) -> list[int]:
    """What the module's own forward gives for the witness's feed: the prompt, then one id at
    a time."""
    spec = importlib.util.spec_from_file_location("demo_engine_in_test", engine)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg, weights = module.load_weights(model)
    net = module.Model(cfg, weights)
    cache = net.new_cache(int(cfg["max_seq_len"]))
    feeds = [ids[:SPEC.prompt_tokens]] + [[i] for i in ids[SPEC.prompt_tokens:]]
    return [int(np.argmax(net.forward(np.array(f, dtype=np.int64), cache)[-1])) for f in feeds]


def test_the_witness_answers_with_the_build_s_own_forward(demo: DemoRepo, tmp_path: Path) -> None:
    engine = demo.path / "build" / "demo_engine.py"
    ids = witness._prompt(SPEC, tmp_path / "prompts")
    done = _witness(tmp_path, engine, demo.model_path, ids)
    assert done.ok and done.handoff_s is not None, done.output[-2000:]
    steps = read_steps(done.output)
    assert len(steps) == SPEC.output_tokens
    assert [s.id for s in steps] == _forward_argmaxes(engine, demo.model_path, ids)
    assert all(s.runner_up is not None and s.margin is not None and s.margin >= 0
               for s in steps)


# A module that says whenever a command of its own runs: any subcommand, or main itself.
COMMANDS_SAY_SO = [
    ("def cmd_bench(args: argparse.Namespace) -> int:\n",
     "def cmd_bench(args: argparse.Namespace) -> int:\n"
     "    print('ENGINE_COMMAND_RAN bench', flush=True)\n"),
    ("def main(argv: list[str] | None = None) -> int:\n",
     "def main(argv: list[str] | None = None) -> int:\n"
     "    print('ENGINE_COMMAND_RAN main', flush=True)\n"),
]


def _variant(demo: DemoRepo, tmp_path: Path, blocks: list[tuple[str, str]]) -> Path:
    source = (demo.path / "build" / "demo_engine.py").read_text()
    for old, new in blocks:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    engine = tmp_path / "build" / "demo_engine.py"
    engine.parent.mkdir(parents=True, exist_ok=True)
    engine.write_text(source)
    return engine


def test_the_witness_runs_no_command_of_the_engine(demo: DemoRepo, tmp_path: Path) -> None:
    engine = _variant(demo, tmp_path, COMMANDS_SAY_SO)
    bench = _bench(tmp_path, engine, demo.model_path)
    assert bench.ok and "ENGINE_COMMAND_RAN main" in bench.output  # the bench is the engine's
    done = _witness(tmp_path, engine, demo.model_path, witness._prompt(SPEC, tmp_path / "p"))
    assert done.ok and len(read_steps(done.output)) == SPEC.output_tokens
    assert "ENGINE_COMMAND_RAN" not in done.output


# What a module could key on when it is imported, printed as one line.
RECORDS_ITS_VIEW = [(
    "\nfrom __future__ import annotations\n",
    "\nfrom __future__ import annotations\n"
    "import inspect as _inspect, json as _json, os as _os, stat as _stat, sys as _sys\n"
    "def _evalbot_view():\n"
    "    env = dict(_os.environ)\n"
    "    fresh = {k: env.pop(k) for k in ('HOME', 'TMPDIR')}  # fresh per run, either role\n"
    "    try:\n"
    "        cgroups = sorted(_os.listdir('/sys/fs/cgroup'))\n"
    "    except OSError:\n"
    "        cgroups = None\n"
    "    return {'argv': _sys.argv, 'orig_argv': _sys.orig_argv,\n"
    "            'cmdline': open('/proc/self/cmdline', 'rb').read().decode(errors='replace'),\n"
    "            'environ': env, 'fresh': sorted(fresh), 'name': __name__,\n"
    "            'main': getattr(_sys.modules.get('__main__'), '__file__', None),\n"
    "            'importers': [(f.filename, f.function) for f in _inspect.stack()[1:]],\n"
    "            'path': _sys.path, 'cwd': _os.getcwd(), 'cgroups': cgroups,\n"
    "            'proc_cgroup': open('/proc/self/cgroup').read(),\n"
    "            'stdin_fifo': _stat.S_ISFIFO(_os.fstat(0).st_mode)}\n"
    "print('EVALBOT_VIEW ' + _json.dumps(_evalbot_view()), flush=True)\n",
)]


def _view(output: str) -> dict[str, Any]:
    [line] = [ln for ln in output.splitlines() if ln.startswith("EVALBOT_VIEW ")]
    return dict(json.loads(line[len("EVALBOT_VIEW "):]))


def test_a_module_sees_the_same_process_in_a_bench_and_a_witness(demo: DemoRepo,
                                                                 tmp_path: Path) -> None:
    engine = _variant(demo, tmp_path, RECORDS_ITS_VIEW)
    bench = _bench(tmp_path, engine, demo.model_path)
    done = _witness(tmp_path, engine, demo.model_path, witness._prompt(SPEC, tmp_path / "p"))
    assert bench.ok and done.ok, (bench.output[-2000:], done.output[-2000:])
    in_bench, in_witness = _view(bench.output), _view(done.output)
    assert "bench" in in_bench["argv"] and in_bench["name"] == "demo_engine"
    assert (in_bench.pop("stdin_fifo"), in_witness.pop("stdin_fifo")) == (False, True)
    assert in_bench == in_witness
