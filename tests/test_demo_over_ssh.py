"""The demo engine evaluated over SSH end to end: a real sshd on loopback, the sandbox on, the
bundled demo repository and model, one PR graded and rendered the way the service would (the
demo profile cut to its witnessed cell, tests/demo_profile.py: the box is what it checks)."""

from __future__ import annotations

import re
from pathlib import Path

from evalbot.config.redact import for_boxes
from evalbot.config.settings import REPO_ROOT
from evalbot.evaluation.evaluate import evaluate
from evalbot.evaluation.profile import load_profile
from evalbot.grading.policy import load_labels
from evalbot.store.jobs import Store
from remote.ssh import SSHBox, SSHTarget
from tests.demo_box import box_config, box_python, demo
from tests.demo_profile import cut_demo_profile

__all__ = ["box_python", "demo"]  # fixtures


def test_broken_demo_pr_over_ssh_is_incorrect_and_names_no_box(sshd, box_python, demo,
                                                                  tmp_path):
    root, repo = demo
    config = box_config(sshd, root, repo, box_python)
    box = SSHBox(config.name, config.workdir, SSHTarget(**sshd.box_kwargs()))  # type: ignore[arg-type]
    policy = load_labels(REPO_ROOT / "evalbot" / "labels.yaml").policy("default")
    profile = load_profile(str(cut_demo_profile(tmp_path / "profile")))
    store = Store(tmp_path / "evalbot.sqlite3")
    try:
        outcome = evaluate(box, config, profile, policy, repo="demo/engine", pr=4,
                           base_sha=repo.main_sha, head_sha=repo.prs["broken"],
                           out=tmp_path / "out", store=store, redact=for_boxes([config]))
    finally:
        box.close()
    verdict = outcome.verdict
    assert verdict["kind"] == "incorrect", verdict["reasons"]
    assert verdict["correctness"]["decision"] == "reject"
    assert verdict["failures"] == []
    jobs = list((Path(config.workdir) / "jobs").iterdir())
    assert len(jobs) == 1  # one job directory: started exactly once
    assert [h["verdict"]["kind"] for h in store.history(repo="demo/engine")] == ["incorrect"]
    store.close()
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert comment == outcome.comment and verdict["headline"] in comment
    for secret in ("127.0.0.1", config.workdir, config.key_file, config.known_hosts):
        assert secret not in comment
    assert not re.search(rf"(?<![\d.]){config.port}(?![\d.])", comment)
