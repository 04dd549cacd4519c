"""The one configuration object: loaded from one YAML file, validated once, passed down.

Secrets never live in the file: it names the environment variables (or files) that hold them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from evalbot.config.errors import ConfigError
from evalbot.config.resources import LABELS_FILE
from evalbot.config.yamlfile import Doc, Section

# The checkout this module sits in: only tests and dev tools use it; the bot reads its own data
# through evalbot.config.resources, which works from a wheel too.
REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@dataclass(frozen=True)
class BoxConfig:
    name: str
    kind: str  # local | ssh
    workdir: str  # job directories, builds and caches live under it on the box
    repo: str  # the engine repository's clone on the box (fetched by full SHA)
    models_dir: str = ""  # where the profile's model files live on the box
    host: str | None = None
    port: int = 22
    user: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    labels: tuple[str, ...] = ()
    trusted: bool = False  # a local box runs PR code on this host: only when marked trusted
    lock_clocks: bool = False
    sd_floor: float | None = None  # calibrated noise of the per-pair log-ratio on this box
    python: str = "python3"  # the box's interpreter for the harness (Python 3.10+ with numpy)
    sandbox_user: str = ""  # PR code runs as this user (docs/box.md); "" only on a trusted box
    sandbox_launcher: tuple[str, ...] = ()  # how a non-root harness enters it (sudo rule)
    # PR code runs as the bot's own user on this box: the test suite's and demos' local boxes
    # only; serve, worker and action refuse a box without a sandbox user unless this is set.
    unsandboxed: bool = False


@dataclass(frozen=True)
class GitHubConfig:
    repo: str  # owner/name
    api_url: str = "https://api.github.com"
    token_env: str = "EVALBOT_GITHUB_TOKEN"
    webhook_secret_env: str = "EVALBOT_WEBHOOK_SECRET"
    bot_login: str = ""  # "": read from the API (the token's user, or the App's slug + [bot])
    app_id: int = 0  # a GitHub App: token_env then holds the App's private key (PEM)
    installation_id: int = 0  # 0: looked up from the repository (GET /repos/{o}/{r}/installation)
    approval_label: str = "evalbot-approved"
    evaluate_drafts: bool = False
    author_may_command: bool = True  # the PR author may /evalbot rerun|cancel|help on own PR
    approve_later_pushes: bool = False  # an approval label admits later heads too (else: its head)
    quota_per_author_per_day: int = 20  # evaluations admitted per author per 24 h (0: no limit)
    quota_per_pr_per_day: int = 10  # ... per PR per 24 h (maintainers' reruns are exempt)
    status_context: str = "evalbot"
    # Round features (`evalbot rounds`, evalbot.github.rounds), all off by default.
    merge_first: bool = False  # label the open PR with the best verdict on current main
    merge_first_label: str = "merge-first"
    auto_merge: bool = False  # merge that PR after a confirmation run (needs merge_first)
    merge_method: str = "merge"  # merge | squash | rebase
    close_stale_after_days: int = 0  # close PRs with no push for this many days (0: never)
    # Pacing (docs/github.md, Retries): GitHub asks integrators to space requests, writes above
    # all, and a transient error (5xx, a dropped connection) is retried after retry_wait_s,
    # doubled at each try (evalbot.github.publish.Backoff). The defaults are GitHub's advice; a
    # test against the fake GitHub sets small ones, which run the same code.
    request_interval_s: float = 0.25  # PyGithub's seconds_between_requests
    write_interval_s: float = 1.0  # PyGithub's seconds_between_writes
    retry_wait_s: float = 1.0  # the first wait before a transient error is retried
    # A delivery (or a reconcile pass) that met a passing fault (5xx, a refused token, the store
    # failing) is handled again after this, doubled up to 5 minutes (evalbot.github.dispatcher).
    delivery_retry_s: float = 5.0


@dataclass(frozen=True)
class ServiceConfig:
    """How `evalbot serve` / `evalbot worker` run (docs/service.md, docs/operations.md)."""

    shadow: bool = False  # evaluate and grade, record what would be published, write no GitHub
    shadow_log: Path | None = None  # shadow mode also appends each write to this JSON-lines file
    metrics_host: str = "127.0.0.1"  # GET /metrics, on its own listener, never the webhook's
    metrics_port: int = 9464  # 0: any free port (printed at start-up)
    aa_every_h: float = 24.0  # periodic A/A per box when idle; 0: never
    signing_key_file: Path | None = None  # Ed25519 private key (0600): sign every verdict
    reports_url: str = ""  # where dashboard/ and runs/<job>/ are published (comment links)
    # Each serve and worker rewrites the store's host record this often; another host takes the
    # store over after 3 missed beats (evalbot.store.owner).
    host_beat_s: float = 5.0
    # A verdict whose publication met a 5xx, a timeout or a refused token is tried again after
    # this, doubled at each try up to 5 minutes, with jitter (evalbot.service.publishing).
    publish_retry_s: float = 5.0


@dataclass(frozen=True)
class Config:
    profile: str
    policy: str
    store: Path
    boxes: tuple[BoxConfig, ...]
    github: GitHubConfig | None = None
    service: ServiceConfig = ServiceConfig()
    labels_file: Path = LABELS_FILE
    source: Path | None = None

    def secret(self, env_name: str) -> str:
        """Read a secret named by the config; never stored on the object itself."""
        value = os.environ.get(env_name, "")
        if not value:
            raise ConfigError(f"environment variable {env_name} (named in the config) is not set")
        return value


_TOP = {"profile", "policy", "store", "boxes", "github", "labels_file", "service"}
_SERVICE = {"shadow", "shadow_log", "metrics_host", "metrics_port", "aa_every_h",
            "signing_key_file", "reports_url", "host_beat_s", "publish_retry_s"}
_BOX = {"name", "kind", "workdir", "repo", "models_dir", "host", "port", "user", "key_file", "known_hosts",
        "labels", "trusted", "lock_clocks", "sd_floor", "python", "sandbox_user",
        "sandbox_launcher", "unsandboxed"}
_GITHUB = {"repo", "api_url", "token_env", "webhook_secret_env", "bot_login", "approval_label",
           "evaluate_drafts", "author_may_command", "quota_per_author_per_day",
           "quota_per_pr_per_day", "status_context", "merge_first", "merge_first_label",
           "auto_merge", "merge_method", "close_stale_after_days", "app_id", "installation_id",
           "approve_later_pushes", "request_interval_s", "write_interval_s", "retry_wait_s",
           "delivery_retry_s"}


def load_config(path: Path) -> Config:
    """Parse and validate a config file; errors name the file, line and key, all of them."""
    doc = Doc(Path(path), collect=True)
    top = Section(doc, "", doc.data, _TOP)
    base = Path(path).resolve().parent
    boxes = _boxes(doc, top, base)
    github = _attempt(doc, lambda: _github(top.section("github", _GITHUB))) \
        if "github" in doc.data else None
    service = _attempt(doc, lambda: _service(top.section("service", _SERVICE), base))
    labels_file = top.get("labels_file", str, None)
    profile = _attempt(doc, lambda: top.get("profile", str))
    store = top.get("store", str, "evalbot.sqlite3")
    doc.finish()
    assert profile is not None and service is not None  # finish() raised otherwise
    return Config(
        profile=profile,
        policy=top.get("policy", str, "default"),
        store=_resolve(base, store),
        boxes=boxes,
        github=github,
        service=service,
        labels_file=_resolve(base, labels_file) if labels_file else LABELS_FILE,
        source=Path(path),
    )


def _boxes(doc: Doc, top: Section, base: Path) -> tuple[BoxConfig, ...]:
    boxes: list[BoxConfig] = []
    for section in _attempt(doc, lambda: top.items("boxes", _BOX)) or []:
        try:
            boxes.append(_box(section, base))
        except ConfigError as exc:
            doc.fail(exc)
    if not boxes and "boxes" in doc.data and not doc.problems:
        doc.fail(doc.error("boxes", "at least one box is required"))
    names = [b.name for b in boxes]
    if len(set(names)) != len(names):
        doc.fail(doc.error("boxes", "box names must be unique"))
    return tuple(boxes)


def _attempt(doc: Doc, read: Callable[[], T]) -> T | None:
    """Read one part; a problem that stops it is kept, so the other parts are still checked."""
    try:
        return read()
    except ConfigError as exc:
        doc.fail(exc)
        return None


def _service(s: Section, base: Path) -> ServiceConfig:
    s.check("metrics_port", lambda p: isinstance(p, int) and 0 <= p < 65536,
            "must be a port number (0: any free port)")
    s.check("aa_every_h", lambda h: isinstance(h, int | float) and h >= 0,
            "must be hours >= 0 (0: no periodic A/A)")
    for key in ("host_beat_s", "publish_retry_s"):
        s.check(key, lambda v: _seconds(v) and v > 0, "must be seconds > 0")
    shadow_log, key = s.get("shadow_log", str, None), s.get("signing_key_file", str, None)
    return ServiceConfig(
        shadow=s.get("shadow", bool, False),
        shadow_log=_resolve(base, shadow_log) if shadow_log else None,
        metrics_host=s.get("metrics_host", str, ServiceConfig.metrics_host),
        metrics_port=s.get("metrics_port", int, ServiceConfig.metrics_port),
        aa_every_h=s.get("aa_every_h", float, ServiceConfig.aa_every_h),
        signing_key_file=_resolve(base, key) if key else None,
        reports_url=s.get("reports_url", str, ""),
        host_beat_s=s.get("host_beat_s", float, ServiceConfig.host_beat_s),
        publish_retry_s=s.get("publish_retry_s", float, ServiceConfig.publish_retry_s),
    )


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _resolve(base: Path, value: str) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else base / p


def _box(s: Section, base: Path) -> BoxConfig:
    kind = s.get("kind", str)
    if kind not in ("local", "ssh"):
        raise s.doc.error(s.path("kind"), f"{kind!r} is not one of local, ssh")
    if kind == "ssh":
        for key in ("host", "user", "key_file", "known_hosts"):
            s.get(key, str)  # required for ssh: raises naming the key
    s.check("port", lambda p: isinstance(p, int) and 0 < p < 65536, "must be a port number")
    s.check("sd_floor", lambda v: isinstance(v, int | float) and 0 < v < 1,
            "must be a fraction between 0 and 1")
    return BoxConfig(
        name=s.get("name", str),
        kind=kind,
        workdir=_box_path(s, "workdir", base, kind, required=True),
        repo=_box_path(s, "repo", base, kind),
        models_dir=_box_path(s, "models_dir", base, kind),
        host=s.get("host", str, None),
        port=s.get("port", int, 22),
        user=s.get("user", str, None),
        key_file=s.get("key_file", str, None),
        known_hosts=s.get("known_hosts", str, None),
        labels=tuple(s.get("labels", list, [])),
        trusted=s.get("trusted", bool, False),
        lock_clocks=s.get("lock_clocks", bool, False),
        sd_floor=s.get("sd_floor", float, None),
        python=s.get("python", str, "python3"),
        sandbox_user=s.get("sandbox_user", str, "" if kind == "local" else "evalbot-sandbox"),
        sandbox_launcher=tuple(s.get("sandbox_launcher", list, [] if kind == "local" else
                                     ["sudo", "-n", "/usr/local/lib/evalbot/sandbox-exec"])),
        unsandboxed=s.get("unsandboxed", bool, False),
    )


def _box_path(s: Section, key: str, base: Path, kind: str, required: bool = False) -> str:
    """A path on the box. A local box's relative path is relative to the config file, as the
    store is: the pipeline passes paths to commands that run in other directories (the job's),
    so a path relative to the bot's working directory would name a different place there. An
    ssh box's path must be absolute: its commands do not all start in the login's home."""
    value = s.get(key, str) if required else s.get(key, str, "")
    if not value or value.startswith("/"):
        return value
    if kind == "local":
        return str(_resolve(base, value))
    if value.startswith("~"):
        raise s.doc.error(s.path(key), f"{value!r}: `~` is not expanded on the box; "
                          "give the absolute path")
    raise s.doc.error(s.path(key), f"{value!r} must be an absolute path on the box")


def _github(s: Section) -> GitHubConfig:
    repo = s.get("repo", str)
    if repo.count("/") != 1:
        raise s.doc.error(s.path("repo"), f"{repo!r} is not owner/name")
    return GitHubConfig(
        repo=repo,
        api_url=s.get("api_url", str, GitHubConfig.api_url),
        token_env=s.get("token_env", str, GitHubConfig.token_env),
        webhook_secret_env=s.get("webhook_secret_env", str, GitHubConfig.webhook_secret_env),
        bot_login=s.get("bot_login", str, GitHubConfig.bot_login),
        app_id=s.get("app_id", int, 0),
        installation_id=s.get("installation_id", int, 0),
        approval_label=s.get("approval_label", str, GitHubConfig.approval_label),
        evaluate_drafts=s.get("evaluate_drafts", bool, False),
        author_may_command=s.get("author_may_command", bool, True),
        approve_later_pushes=s.get("approve_later_pushes", bool, False),
        quota_per_author_per_day=s.get("quota_per_author_per_day", int, 20),
        quota_per_pr_per_day=s.get("quota_per_pr_per_day", int, 10),
        status_context=s.get("status_context", str, "evalbot"),
        merge_first=s.get("merge_first", bool, False),
        merge_first_label=s.get("merge_first_label", str, "merge-first"),
        auto_merge=_check_rounds(s),
        merge_method=s.get("merge_method", str, "merge"),
        close_stale_after_days=s.get("close_stale_after_days", int, 0),
        request_interval_s=s.get("request_interval_s", float, GitHubConfig.request_interval_s),
        write_interval_s=s.get("write_interval_s", float, GitHubConfig.write_interval_s),
        retry_wait_s=s.get("retry_wait_s", float, GitHubConfig.retry_wait_s),
        delivery_retry_s=s.get("delivery_retry_s", float, GitHubConfig.delivery_retry_s),
    )


def _check_rounds(s: Section) -> bool:
    """Validate the round keys; returns auto_merge."""
    s.check("merge_method", lambda m: m in ("merge", "squash", "rebase"),
            "must be merge, squash or rebase")
    s.check("close_stale_after_days", lambda d: isinstance(d, int) and d >= 0,
            "must be whole days >= 0 (0: never close)")
    for quota in ("quota_per_author_per_day", "quota_per_pr_per_day"):
        s.check(quota, lambda q: isinstance(q, int) and not isinstance(q, bool) and q >= 0,
                "must be a whole number >= 0 (0: no limit)")
    for key in ("request_interval_s", "write_interval_s", "retry_wait_s"):
        s.check(key, lambda v: _seconds(v) and v >= 0, "must be seconds >= 0")
    s.check("delivery_retry_s", lambda v: _seconds(v) and v > 0, "must be seconds > 0")
    for key in ("app_id", "installation_id"):
        s.check(key, lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                "must be a GitHub id (a whole number)")
    auto_merge = bool(s.get("auto_merge", bool, False))
    if auto_merge and not s.get("merge_first", bool, False):
        raise s.doc.error(s.path("auto_merge"), "auto_merge merges the merge-first PR: "
                                                "it needs merge_first: true")
    return auto_merge
