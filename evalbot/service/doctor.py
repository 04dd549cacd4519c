"""`evalbot doctor`: check a deployment before it runs a job, one line per check.

Config, labels and profile are validated on load; then each box: reachable, the harness's Python
with numpy, the engine repository, the GPU, every model file against its sha256 pin; then the
secrets the config names. Nothing a check prints names a host, address or port.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import click

from evalbot.config.errors import EvalbotError

if TYPE_CHECKING:
    from evalbot.config.settings import BoxConfig, Config
    from evalbot.evaluation.profile import Profile
    from evalbot.remote.box import Box

MODES = ("service", "actions", "poll")  # serve/webhook; `evalbot action` + worker; `evalbot poll`


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def run_checks(config: Config, profile: Profile, mode: str = "service") -> Iterator[Check]:
    for box_config in config.boxes:
        yield from _guarded(f"box {box_config.name}", _box_checks(box_config, profile))
        yield from _guarded(f"box {box_config.name}: witness floors",
                            witness_floor_checks(config.store, box_config.name, profile.name))
    yield from _guarded("secrets and GitHub", _secret_checks(config, mode))


def witness_floor_checks(store: Path, box: str, profile: str) -> Iterator[Check]:
    """Each witness floor of the box against its recent jobs' pairs (the store's, no box time):
    a stale one confirms nothing there until `evalbot calibrate` or the periodic A/A measures
    it again."""
    from evalbot.report.witness_floors import box_checks
    from evalbot.store.schema import read_only

    name = f"box {box}: witness floor"
    if not store.is_file():
        yield Check(f"{name}s", True, "no jobs recorded yet")
        return
    with read_only(store) as db:
        found = box_checks(db, box, profile)
    if not found:
        yield Check(f"{name}s", True, "no recent job ran a witness with a floor")
    for c in found:
        yield Check(f"{name} {c.witness}", not c.stale, c.text())


def _guarded(what: str, checks: Iterator[Check]) -> Iterator[Check]:
    """doctor is where an operator goes when something is wrong, so it must not crash itself:
    a failure none of the checks foresaw (GitHub unreachable, a box that drops mid-check)
    becomes one FAIL line naming what could not be checked, and the other checks still run."""
    try:
        yield from checks
    except Exception as exc:  # noqa: BLE001 (any failure here is a finding, not a crash)
        yield Check(what, False, f"not checked: {type(exc).__name__}: {_first_line(exc)}")


def refusal(config: Config, profile: Profile) -> str | None:
    """What `serve`, `worker` and `action` would refuse this config with, word for word (all
    three end in the same workers, and `poll` queues jobs for them); None when they accept it."""
    from evalbot.config.errors import ConfigError
    from evalbot.service.pool import check_pool

    try:
        check_pool(config, profile, serving=True)
    except ConfigError as exc:
        return str(exc)
    return None


def _box_checks(box_config: BoxConfig, profile: Profile) -> Iterator[Check]:
    from evalbot.remote.box import BoxError
    from evalbot.service.pool import open_box

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
        if box_config.sandbox_user:
            yield _sandbox_entry_check(box, box_config, name)
            yield _sandbox_works_check(box, box_config, name)
            yield _limits_check(box, box_config, profile, name)
        for model in profile.models:
            yield _model_check(box, box_config, name, model.name, model.file, model.sha256)
    finally:
        box.close()


def _probe(box: Box, name: str, argv: list[str], optional: bool = False,
           show: object = None) -> Check:
    from evalbot.remote.box import BoxError

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


def _sandbox_entry_check(box: Box, box_config: BoxConfig, name: str) -> Check:
    """How the harness enters the sandbox: as root directly, or through the one sudo rule."""
    from evalbot.remote.box import BoxError

    check = f"{name}: sandbox entry"
    launcher = list(box_config.sandbox_launcher)
    try:
        if not launcher:
            uid = box.run(["id", "-u"], timeout_s=60).output.strip()
            return Check(check, uid == "0", "the harness runs as root: no sudo rule needed"
                         if uid == "0" else "sandbox_launcher is empty but the box user is not "
                         "root: set it to the sudo rule of docs/box.md")
        if launcher[0] != "sudo":
            return Check(check, True, f"launcher {launcher[0]} (not sudo: not checked)")
        command = next((a for a in launcher[1:] if not a.startswith("-")), "")
        got = box.run(["sudo", "-n", "-l", "--", command], timeout_s=60)
    except BoxError as exc:
        return Check(check, False, f"sudo is not available on the box ({_first_line(exc)}); "
                     "`evalbot box init` installs the rule")
    if got.returncode != 0 or command not in got.output:
        return Check(check, False, f"no passwordless sudo rule for {command}: add "
                     f"`{box_config.user or 'evalbot'} ALL=(root) NOPASSWD: {command}` to "
                     "/etc/sudoers.d/evalbot (`evalbot box init` does it)")
    return Check(check, True, f"sudo rule for {command}")


def _sandbox_works_check(box: Box, box_config: BoxConfig, name: str) -> Check:
    """A command started in the sandbox as a run is (bubblewrap in user namespaces, which some
    kernels and distributions refuse): a box where it fails would fail every job as infra."""
    from evalbot.engine.sandbox.session import EXEC
    from evalbot.remote.box import BoxError

    # a root harness runs the job's copy of the launcher: the bot's own, sent as text here
    launcher = list(box_config.sandbox_launcher) or [box_config.python, "-I", "-c",
                                                     EXEC.read_text()]
    try:
        got = box.run([*launcher, "check", str(box_config.sandbox_user)], timeout_s=120)
    except BoxError as exc:
        return Check(f"{name}: sandbox works", False, _first_line(exc))
    out = got.output.strip().splitlines()
    if got.returncode != 0:
        return Check(f"{name}: sandbox works", False, out[-1] if out else f"exit {got.returncode}")
    if not out or "sized tmpfs" not in out[-1]:  # it would refuse every run's RLIMIT_DATA
        return Check(f"{name}: sandbox works", False, "the installed launcher predates sized "
                     "tmpfs mounts and RLIMIT_DATA: run `evalbot box init` again")
    return Check(f"{name}: sandbox works", True, out[-1])


def _limits_check(box: Box, box_config: BoxConfig, profile: Profile, name: str) -> Check:
    """Which caps a run gets on this box (a memory cgroup needs a harness that may make one),
    and the profile's values (docs/box.md, "What a run may use")."""
    from evalbot.engine.sandbox import memory_cap
    from evalbot.remote.box import BoxError

    check = f"{name}: limits"
    try:  # as the harness user, as the harness tries it per run
        got = box.run([box_config.python, "-I", "-c", Path(memory_cap.__file__).read_text()],
                      timeout_s=120)
    except BoxError as exc:
        return Check(check, False, _first_line(exc))
    lines = got.output.strip().splitlines()
    if got.returncode != 0 or not lines:
        return Check(check, False, f"cannot tell: {lines[-1] if lines else got.returncode}")
    stages = "; ".join(f"{stage} " + ", ".join(f"{k} {v}" for k, v in sorted(caps.items()))
                       for stage, caps in sorted(profile.limits.items()))
    return Check(check, True, f"{lines[-1]}; profile {profile.name}: "
                 f"{stages or 'no limits (the box defaults: docs/box.md)'}")


def _model_check(box: Box, box_config: BoxConfig, name: str, model: str, file: str,
                 pin: str) -> Check:
    path = file if file.startswith("/") or not box_config.models_dir else \
        str(PurePosixPath(box_config.models_dir) / file)
    from evalbot.remote.box import BoxError

    check = Check(f"{name}: model {model} sha256", False, "")
    try:
        size = box.run(["stat", "-c", "%s", "--", path], timeout_s=60).output.strip()
        # Hashing a multi-GB model takes minutes: say so before, not after.
        gib = f"{int(size) / 2**30:.1f} GiB" if size.isdigit() else "size unknown"
        click.echo(f"      {name}: hashing model {model} ({gib}) ...", err=True)
        started = time.monotonic()
        got = box.run(["sha256sum", "--", path], timeout_s=1800)
        click.echo(f"      {name}: hashed model {model} in {time.monotonic() - started:.0f} s",
                   err=True)
    except BoxError as exc:
        return Check(check.name, False, _first_line(exc))
    digest = got.output.split()[0] if got.returncode == 0 and got.output else ""
    if not digest:
        return Check(check.name, False, f"{file}: not readable on the box")
    if digest != pin:
        return Check(check.name, False, f"{file}: sha256 {digest[:12]}… does not match the "
                     f"profile's pin {pin[:12]}…")
    return Check(check.name, True, f"{file} matches its pin")


def _secret_checks(config: Config, mode: str) -> Iterator[Check]:
    if config.service.signing_key_file is not None:
        yield _signing_key_check(config.service.signing_key_file)
    if config.github is None:
        return
    gh = config.github
    present = bool(os.environ.get(gh.token_env))
    what = "the App's private key" if gh.app_id else "the token"
    yield Check(f"secret {gh.token_env}", present,
                f"set ({what})" if present else f"not set in the environment ({what})")
    if mode == "service":
        secret = bool(os.environ.get(gh.webhook_secret_env))
        yield Check(f"secret {gh.webhook_secret_env}", secret,
                    "set" if secret else "not set in the environment")
    else:
        yield Check(f"secret {gh.webhook_secret_env}", True, f"not used in {mode} mode")
    if present:
        from evalbot.github.app_auth import identity_checks

        try:
            yield from (Check(name, ok, detail) for name, ok, detail in identity_checks(config))
        except Exception as exc:  # noqa: BLE001 (unreachable is a finding; see _guarded)
            # the exception's text names the API's host and port: only its kind is printed
            yield Check("github identity", False, f"cannot reach the GitHub API "
                        f"({type(exc).__name__}); not checked: identity, write access")


def _signing_key_check(path: Path) -> Check:
    from evalbot.audit.signing import SignatureError, load_signing_key

    try:  # the same loader the service signs with: mode 0600, unencrypted Ed25519 PEM
        key = load_signing_key(path)
    except SignatureError as exc:
        return Check("signing key file", False, _first_line(exc))
    return Check("signing key file", True, f"{path}: Ed25519 key {key.key_id}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@click.command("doctor")
@click.option("--config", "config_file", type=click.Path(path_type=Path), required=True)
@click.option("--offline", is_flag=True, help="validate the files only; contact no box")
@click.option("--mode", type=click.Choice(MODES), default="service", show_default=True,
              help="how the bot runs: the webhook secret is needed only by the service")
def doctor(config_file: Path, offline: bool, mode: str) -> None:
    """Check the config, profile and policy, then each box, its models, and the secrets."""
    from evalbot.config.redact import for_boxes
    from evalbot.config.settings import load_config
    from evalbot.evaluation.profile import load_profile
    from evalbot.grading.policy import load_labels

    config = load_config(config_file)
    book = load_labels(config.labels_file)
    book.policy(config.policy, str(config.labels_file))
    profile = load_profile(config.profile)
    click.echo(f"ok    config: profile {profile.name} ({profile.cell_count} cells), "
               f"policy {config.policy}, {len(config.boxes)} box(es): "
               + ", ".join(_box_line(b) for b in config.boxes))
    refused = refusal(config, profile)
    if refused:
        click.echo(f"FAIL  config: {refused}")
    if offline:
        click.echo("skip  boxes, models, secrets, GitHub: not checked (--offline)")
        if refused:
            raise EvalbotError("1 check(s) failed")
        return
    # The known_hosts path is the operator's own file, named so a refused key can be pinned.
    redact = for_boxes([dataclasses.replace(b, known_hosts=None) for b in config.boxes])
    failed = int(refused is not None)
    for check in run_checks(config, profile, mode):
        failed += not check.ok
        click.echo(redact(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}"))
    if failed:
        raise EvalbotError(f"{failed} check(s) failed")


def _box_line(box: BoxConfig) -> str:
    return f"{box.name} ({box.kind}{', trusted' if box.trusted else ''})"
