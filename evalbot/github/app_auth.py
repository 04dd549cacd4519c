"""GitHub credentials and the bot's own identity, both from the API.

Two ways to authenticate, both PyGithub's own:
- a token (a personal token, or the Actions GITHUB_TOKEN): Auth.Token;
- a GitHub App (`github.app_id`): Auth.AppAuth signs a JWT with the App's private key, and
  Auth.AppInstallationAuth trades it for an installation token, which PyGithub renews by itself
  shortly before it expires (so a worker running for hours never sends an expired token).

The secret named by `github.token_env` is the token, or in App mode the App's private key (PEM).
Who the bot is (`bot_login`: its comments carry the sticky marker) is read from the API unless
the config pins it: GET /user for a token, GET /app (slug + "[bot]") for an App.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import replace

from github import Auth, Github, GithubException, GithubIntegration

from evalbot.config.errors import ConfigError
from evalbot.config.settings import Config, GitHubConfig

# The Actions GITHUB_TOKEN is an installation token of GitHub's own Actions App: GET /user
# answers 403 "Resource not accessible by integration", and its comments are this account's.
ACTIONS_BOT = "github-actions[bot]"
APP_WRITES = ("issues", "pull_requests", "statuses")  # comments and labels, PRs, commit statuses


def github_auth(gh: GitHubConfig, secret: str) -> Auth.Auth:
    """The PyGithub authentication for the config: a token, or the App's installation."""
    if not gh.app_id:
        return Auth.Token(secret)
    app = _app(gh, secret)
    return app.get_installation_auth(gh.installation_id or installation_id(gh, secret))


def installation_id(gh: GitHubConfig, secret: str) -> int:
    """The App's installation on the configured repository (GET /repos/{o}/{r}/installation)."""
    owner, name = gh.repo.split("/")
    with GithubIntegration(auth=_app(gh, secret), base_url=gh.api_url.rstrip("/")) as gi:
        try:
            return int(gi.get_repo_installation(owner, name).id)
        except GithubException as exc:
            raise ConfigError(f"the GitHub App {gh.app_id} is not installed on {gh.repo} "
                              f"(HTTP {exc.status})") from exc


@functools.lru_cache(maxsize=16)
def bot_login(gh: GitHubConfig, secret: str) -> str:
    """The login the bot's comments are written by: the config's, else asked of GitHub."""
    if gh.bot_login:
        return gh.bot_login
    if gh.app_id:
        with GithubIntegration(auth=_app(gh, secret), base_url=gh.api_url.rstrip("/")) as gi:
            return f"{gi.get_app().slug}[bot]"
    with Github(auth=Auth.Token(secret), base_url=gh.api_url.rstrip("/"), retry=None) as g:
        try:
            return str(g.get_user().login)
        except GithubException as exc:
            if exc.status == 403:  # an installation token cannot read /user: the Actions one
                return ACTIONS_BOT
            raise ConfigError(f"cannot read the token's user (GET /user: HTTP {exc.status})") \
                from exc


def identified(config: Config) -> GitHubConfig:
    """The config's github section with `bot_login` filled in from the API when not pinned."""

    if config.github is None:
        raise ConfigError(f"{config.source}: a `github:` section is required for this command")
    gh = config.github
    if gh.bot_login:
        return gh
    return replace(gh, bot_login=bot_login(gh, config.secret(gh.token_env)))


def identity_checks(config: Config) -> Iterator[tuple[str, bool, str]]:
    """doctor's GitHub lines: who the credentials are, and whether they may write the PRs."""
    assert config.github is not None
    gh, secret = config.github, config.secret(config.github.token_env)
    try:
        login = bot_login(replace(gh, bot_login=""), secret)
    except (GithubException, ConfigError) as exc:
        yield "github identity", False, _short(exc)
        return
    pinned = gh.bot_login
    if pinned and pinned != login:
        yield ("github identity", False, f"the credentials are {login}, but bot_login is "
               f"{pinned}: the sticky comment would never be found (drop bot_login)")
    else:
        yield "github identity", True, login + ("" if pinned else " (read from the API)")
    if login == ACTIONS_BOT:
        yield ("github write access", True, "GITHUB_TOKEN: granted by the workflow's "
               "`permissions:` (pull-requests, issues, statuses: write)")
    else:
        yield _write_access(gh, secret)


def _write_access(gh: GitHubConfig, secret: str) -> tuple[str, bool, str]:
    name = "github write access"
    try:
        if gh.app_id:
            return name, *_installation_grants(gh, secret)
        with Github(auth=Auth.Token(secret), base_url=gh.api_url.rstrip("/"), retry=None) as g:
            repo = g.get_repo(gh.repo)
            push = bool(repo.permissions and repo.permissions.push)
    except (GithubException, ConfigError) as exc:
        return name, False, _short(exc)
    return (name, push, f"{gh.repo}: push" if push else
            f"{gh.repo}: the token may not write (comments, labels and statuses need it)")


def _installation_grants(gh: GitHubConfig, secret: str) -> tuple[bool, str]:
    """What the App's installation on the repository may do (GET /repos/{o}/{r}/installation)."""
    owner, repo = gh.repo.split("/")
    with GithubIntegration(auth=_app(gh, secret), base_url=gh.api_url.rstrip("/")) as gi:
        granted = gi.get_repo_installation(owner, repo).permissions or {}
    missing = [p for p in APP_WRITES if granted.get(p) != "write"]
    if missing:
        return False, (f"the installation lacks write on {', '.join(missing)}: grant it in the "
                       "App's settings, then accept the new permissions on the installation")
    return True, ", ".join(APP_WRITES) + ": write"


def _app(gh: GitHubConfig, secret: str) -> Auth.AppAuth:
    return Auth.AppAuth(gh.app_id, secret)


def _short(exc: BaseException) -> str:
    if isinstance(exc, GithubException):
        message = exc.data.get("message") if isinstance(exc.data, dict) else None
        return f"HTTP {exc.status}: {message or 'error'}"
    return str(exc).splitlines()[0]
