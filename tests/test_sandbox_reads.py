"""Issue 45's reads of the harness's own files, in the production shape (a real sshd on loopback,
the sandbox user, `evaluate()` with an SSH box, the cut demo profile).

The hostile head's bench computes a cheaper model (one of the model's layers), so its greedy
tokens are not what its score run predicts, and copies main's greedy tokens from main's warm-up
sample log under the job's `logs/` to pass the speed/score consistency check anyway (issue 45:
it did, and got `eval:XL`). Every one of its bench runs also reads `job.json` (the box config's
`repo` verbatim), the harness's own log and status, and lists `/sys/fs/cgroup`, and prints what
it found. Every one of its processes looks for the per-run cgroup under `/sys/fs/cgroup`, which
exists only while the harness times a witness (a witness that knew could run other code), and
fails when it sees it.

It finds none of it, its copy fails, the consistency check rejects it, and its witness runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import hostile_demo as hd
from tests.demo_box import box_python, demo, evaluate_over_ssh

__all__ = ["box_python", "demo"]  # fixtures

WITNESS = "decode-64"

# What the head reads, and how it reports: one `EVALBOT_READS <json>` line per bench run.
READS = r'''
def _evalbot_reads(result):
    import json, os
    found = {"jobdir": None, "logs": [], "copied": [], "files": {}, "cgroup": None}
    here = os.getcwd()  # its artifacts, inside the job directory
    while here != "/" and not os.path.exists(os.path.join(here, "job.json")):
        here = os.path.dirname(here)
    found["jobdir"] = here
    logs = os.path.join(here, "logs")
    try:
        names = os.listdir(logs)
    except OSError:
        names = []
    names += ["sample-%05d-base.log" % i for i in range(1, 20)]  # the names the harness gives
    for name in dict.fromkeys(names):
        try:
            text = open(os.path.join(logs, name), errors="replace").read()
        except OSError:
            continue
        found["logs"].append(name)
        for line in text.splitlines():
            if name.endswith("-base.log") and line.startswith("BENCH_JSON "):
                main = json.loads(line[len("BENCH_JSON "):])
                for ctx, r in result.items():  # main's greedy tokens as its own
                    if ctx in main:
                        r["decode_argmax"] = main[ctx]["decode_argmax"]
                        found["copied"].append(name)
    for name in ("job.json", "harness.log", "harness.pid", "status.json", "results.json"):
        try:
            found["files"][name] = open(os.path.join(here, name), errors="replace").read()[:4000]
        except OSError:
            pass
    try:
        found["cgroup"] = os.listdir("/sys/fs/cgroup")
    except OSError:
        found["cgroup"] = []
    print("EVALBOT_READS " + json.dumps(found), flush=True)


def _evalbot_a_witness():
    """Whether the harness's per-run cgroup shows: it exists only while a witness runs."""
    import os
    for _root, dirs, _files in os.walk("/sys/fs/cgroup"):
        if "evalbot-runs" in dirs:
            return True
    return False


if _evalbot_a_witness():  # one that knew could run other code there; this one says so, failing
    raise SystemExit("a witness")
'''

CHEAPER_BENCH = [
    ("    ids = bench_tokens(args.tokens, longest)\n",
     "    ids = bench_tokens(args.tokens, longest)\n"
     "    model.n_layers = 1  # a cheaper model: its first layer only\n"),
    ('    print("BENCH_JSON " + json.dumps(result), flush=True)\n',
     '    _evalbot_reads(result)\n'
     '    print("BENCH_JSON " + json.dumps(result), flush=True)\n'),
    ("\nfrom __future__ import annotations\n", "\nfrom __future__ import annotations\n" + READS),
]


def _reads(jobs: Path) -> list[dict[str, Any]]:
    """Every EVALBOT_READS line of the head's kept logs (its warm-up samples, its failures)."""
    return [json.loads(line[len("EVALBOT_READS "):]) for log in sorted(jobs.rglob("*-head.log"))
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("EVALBOT_READS ")]


def _head_witness_samples(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for w in results["witnesses"] if w["name"] == WITNESS for s in w["samples"]
            if s["side"] == "head" and not s["dropped"]]


def test_a_head_reads_no_harness_file_and_its_copied_tokens_fail(sshd, box_python, demo,
                                                                  tmp_path):
    _root, repo = demo
    outcome, config = evaluate_over_ssh(sshd, box_python, demo, tmp_path,
                                        hd.head(repo, "copy-main", CHEAPER_BENCH), pr=45)
    results = json.loads((tmp_path / "out" / "private" / "results.json").read_text())
    witnessed = _head_witness_samples(results)
    assert witnessed and not any(s["error"] for s in witnessed), witnessed  # none knew itself
    reads = _reads(Path(config.workdir) / "jobs")
    assert reads, "the head's bench ran and reported"
    for found in reads:
        assert found["jobdir"] and found["jobdir"] != "/", found  # it found the job directory
        assert found["logs"] == [] and found["copied"] == [], found["logs"]
        assert found["files"] == {}, sorted(found["files"])
        assert found["cgroup"] == [], found["cgroup"]
    assert config.repo not in json.dumps(reads)
    verdict = outcome.verdict
    consistency = verdict["correctness"]["consistency"]
    assert consistency["head_mismatch"] and not consistency["base_mismatch"], consistency
    assert verdict["tier"] is None, (verdict["kind"], verdict["reasons"])
    assert any("speed/score mismatch" in r for r in verdict["correctness"]["reasons"]), \
        verdict["correctness"]["reasons"]
