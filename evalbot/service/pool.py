"""The pool of boxes from the config: which boxes may run the profile, opening them, and the
box-side operations the worker needs beyond the pipeline (what main is, stopping a run).

One worker per eligible box takes one job at a time (DESIGN section 2, step 3); fairness across
authors and PRs is the store's lease order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import PurePosixPath

from evalbot.config.errors import ConfigError, PipelineError
from evalbot.config.settings import BoxConfig, Config
from evalbot.evaluation.profile import Profile
from evalbot.remote.box import Box, BoxError, Detached

_SHA = re.compile(r"[0-9a-f]{40}\Z")


def eligible(boxes: Iterable[BoxConfig], profile: Profile) -> list[BoxConfig]:
    """The boxes whose labels include every label the profile requires."""
    need = set(profile.box_labels)
    return [b for b in boxes if need <= set(b.labels)]


def check_pool(config: Config, profile: Profile, *, serving: bool) -> list[BoxConfig]:
    """The boxes to run workers on; refuses an empty pool and, for the service, any local box
    not marked trusted (a local box runs PR code on the bot host, DESIGN section 6)."""
    if serving:
        require_sandbox(config)
        untrusted = [b.name for b in config.boxes if b.kind == "local" and not b.trusted]
        if untrusted:
            raise ConfigError(f"{config.source}: box {', '.join(untrusted)} is local but not "
                              "marked `trusted: true`; `evalbot serve` would run PR code on "
                              "this host (use an ssh box, or mark it trusted deliberately)")
    boxes = eligible(config.boxes, profile)
    if not boxes:
        need = ", ".join(profile.box_labels)
        raise ConfigError(f"{config.source}: no box carries the labels profile "
                          f"{profile.name} requires ({need})")
    return boxes


def require_sandbox(config: Config) -> None:
    """The service runs PR code only as a sandbox user: without one the PR runs as the bot
    itself and can read its environment (tokens) through /proc (docs/box.md)."""
    bare = [b.name for b in config.boxes if not b.sandbox_user and not b.unsandboxed]
    if bare:
        raise ConfigError(f"{config.source}: box {', '.join(bare)} has no sandbox_user; "
                          "evalbot would run PR code as its own user there (run `evalbot box "
                          "init` on the box and set sandbox_user)")


def open_box(box_config: BoxConfig) -> Box:
    """A connected Box for one configured box."""
    if box_config.kind == "local":
        from evalbot.remote.local import LocalBox

        return LocalBox(box_config.name, box_config.workdir)
    from evalbot.remote.ssh import SSHBox, SSHTarget

    assert box_config.host and box_config.user and box_config.key_file \
        and box_config.known_hosts  # the config loader requires them for ssh boxes
    box = SSHBox(box_config.name, box_config.workdir, SSHTarget(
        box_config.host, box_config.port, box_config.user, box_config.key_file,
        box_config.known_hosts))
    box.connect()
    return box


def resolve_main(box: Box, box_config: BoxConfig) -> str:
    """The engine repository's main (its default branch, HEAD) as the box sees it now."""
    if not box_config.repo:
        raise PipelineError(f"box {box_config.name}: no `repo` configured, cannot resolve main")
    got = box.run(["git", "ls-remote", "--", box_config.repo, "HEAD"], timeout_s=120)
    first = got.output.strip().split("\n", 1)[0].split("\t", 1)[0] if got.output else ""
    if got.returncode != 0 or not _SHA.match(first):
        raise PipelineError(f"box {box_config.name}: cannot resolve main of the engine "
                            f"repository (git ls-remote exit {got.returncode})")
    return first


def stop_run(box: Box, box_config: BoxConfig, job_id: str) -> bool:
    """Kill the job's detached harness and every process under it on the box.

    The harness and each engine process run in their own process groups. The whole tree is
    stopped first (SIGSTOP), so the harness cannot record its killed children as the PR's crash,
    then each process and its group is killed. True when a live run was found."""
    jobdir = PurePosixPath(box_config.workdir) / "jobs" / job_id
    got = box.run(["cat", str(jobdir / "harness.pid")], timeout_s=60)
    pid = got.output.strip()
    if got.returncode != 0 or not pid.isdigit():
        return False
    run = Detached(str(jobdir), int(pid))
    if not box.is_running(run):  # checked first: never signal a reused pid
        return False
    tree = box.run(["ps", "-e", "-o", "pid=,ppid="], timeout_s=60)
    victims = [str(pid) for pid in _descendants(run.pid, tree.output)]
    box.run(["kill", "-STOP", "--", *victims], timeout_s=60)
    box.run(["kill", "-KILL", "--", *(f"-{pid}" for pid in victims)], timeout_s=60)  # groups
    box.run(["kill", "-KILL", "--", *victims], timeout_s=60)  # processes without their own
    return True


def _descendants(root: int, ps_output: str) -> list[int]:
    """root and every process below it, parents before children."""
    children: dict[int, list[int]] = {}
    for line in ps_output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            children.setdefault(int(parts[1]), []).append(int(parts[0]))
    order, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        order.append(pid)
        todo.extend(children.get(pid, []))
    return order


def close_quietly(box: Box) -> None:
    try:
        box.close()
    except BoxError:
        pass
