"""`evalbot doctor`: check a deployment before it runs a job, one line per check.

Config, labels and profile are validated on load; then each box: reachable, the harness's Python
with numpy, the engine repository, the GPU, every model file against its sha256 pin; then the
secrets the config names. Nothing a check prints names a host, address or port.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from evalbot.config import BoxConfig, Config
from evalbot.errors import EvalbotError
from evalbot.profile import Profile
from remote.box import Box, BoxError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run_checks(config: Config, profile: Profile) -> Iterator[Check]:
    for box_config in config.boxes:
        yield from _box_checks(box_config, profile)
    yield from _secret_checks(config)


def _box_checks(box_config: BoxConfig, profile: Profile) -> Iterator[Check]:
    from evalbot.pool import open_box

    name = f"box {box_config.name}"
    try:
        box = open_box(box_config)
    except (BoxError, EvalbotError, OSError) as exc:
        yield Check(f"{name}: reachable", False, _first_line(exc))
        return
    try:
        yield Check(f"{name}: reachable", True, box_config.kind)
        yield _probe(box, f"{name}: python with numpy", [box_config.python, "-c",
                     "import sys, numpy; print(sys.version.split()[0], numpy.__version__)"])
        if box_config.repo:
            yield _probe(box, f"{name}: engine repository", ["git", "ls-remote", "--",
                         box_config.repo, "HEAD"], show=lambda out: out.split()[0][:12])
        yield _probe(box, f"{name}: GPU", ["nvidia-smi", "-L"], optional=not profile.gpu)
        for model in profile.models:
            yield _model_check(box, box_config, name, model.name, model.file, model.sha256)
    finally:
        box.close()


def _probe(box: Box, name: str, argv: list[str], optional: bool = False,
           show: object = None) -> Check:
    try:
        got = box.run(argv, timeout_s=120)
    except BoxError as exc:
        if optional:
            return Check(name, True, "none (optional)")
        return Check(name, False, f"{argv[0]} is not available on the box ({_first_line(exc)})")
    out = got.output.strip()
    if got.returncode != 0:
        return Check(name, optional, ("none (optional)" if optional else "failed: ")
                     + (out.splitlines()[-1] if out else f"exit {got.returncode}"))
    text = show(out) if callable(show) else (out.splitlines()[0] if out else "ok")
    return Check(name, True, str(text))


def _model_check(box: Box, box_config: BoxConfig, name: str, model: str, file: str,
                 pin: str) -> Check:
    path = file if file.startswith("/") or not box_config.models_dir else \
        str(PurePosixPath(box_config.models_dir) / file)
    check = Check(f"{name}: model {model} sha256", False, "")
    try:
        got = box.run(["sha256sum", "--", path], timeout_s=1800)
    except BoxError as exc:
        return Check(check.name, False, _first_line(exc))
    digest = got.output.split()[0] if got.returncode == 0 and got.output else ""
    if not digest:
        return Check(check.name, False, f"{file}: not readable on the box")
    if digest != pin:
        return Check(check.name, False, f"{file}: sha256 {digest[:12]}… does not match the "
                     f"profile's pin {pin[:12]}…")
    return Check(check.name, True, f"{file} matches its pin")


def _secret_checks(config: Config) -> Iterator[Check]:
    if config.github is None:
        return
    for env in (config.github.token_env, config.github.webhook_secret_env):
        present = bool(os.environ.get(env))
        yield Check(f"secret {env}", present, "set" if present else "not set in the environment")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
