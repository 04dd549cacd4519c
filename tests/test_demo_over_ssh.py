"""The demo engine evaluated over SSH end to end: a real sshd on loopback, the sandbox on, the
bundled demo repository and model, one PR graded and rendered the way the service would (the
demo profile cut to its witnessed cell, tests/demo_profile.py: the box is what it checks)."""

from __future__ import annotations

import re
from pathlib import Path

from evalbot.store.jobs import Store
from tests.demo_box import box_python, demo, evaluate_over_ssh

__all__ = ["box_python", "demo"]  # fixtures


def test_broken_demo_pr_over_ssh_is_incorrect_and_names_no_box(sshd, box_python, demo,
                                                                  tmp_path):
    _root, repo = demo
    outcome, config = evaluate_over_ssh(sshd, box_python, demo, tmp_path, repo.prs["broken"],
                                        pr=4)
    verdict = outcome.verdict
    assert verdict["kind"] == "incorrect", verdict["reasons"]
    assert verdict["correctness"]["decision"] == "reject"
    assert verdict["failures"] == []
    jobs = list((Path(config.workdir) / "jobs").iterdir())
    assert len(jobs) == 1  # one job directory: started exactly once
    store = Store(tmp_path / "evalbot.sqlite3")
    assert [h["verdict"]["kind"] for h in store.history(repo="demo/engine")] == ["incorrect"]
    store.close()
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert comment == outcome.comment and verdict["headline"] in comment
    for secret in ("127.0.0.1", config.workdir, config.key_file, config.known_hosts):
        assert secret not in comment
    assert not re.search(rf"(?<![\d.]){config.port}(?![\d.])", comment)
