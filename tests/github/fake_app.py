"""The fake GitHub, extended with a GitHub App: JWTs verified against the App's public key,
installation tokens that expire, and the documented App endpoints (checked against the OpenAPI
description like every other operation of the fake)."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta, timezone
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from werkzeug.wrappers import Request, Response

from tests.github.fake_github import PREFIX, REPO, FakeGitHub

JWT_LOGIN = "<the App's JWT>"  # the pseudo-login a valid JWT maps to in the fake's token table
APP_OPS = {"apps/get-authenticated", "apps/create-installation-access-token",
           "apps/get-repo-installation"}


class AppFakeGitHub(FakeGitHub):
    def __init__(self, app_id: int = 4242, slug: str = "evalbot-test", installation: int = 77,
                 token_lifetime: timedelta = timedelta(hours=1)) -> None:
        super().__init__()
        self.app_id, self.slug, self.installation = app_id, slug, installation
        self.token_lifetime = token_lifetime
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode()
        self._public = key.public_key()
        self.expiry: dict[str, datetime] = {}  # installation token -> when GitHub stops taking it
        self.minted: list[str] = []
        self.bot = f"{slug}[bot]"
        self.grants = {"issues": "write", "pull_requests": "write", "statuses": "write",
                       "contents": "read", "metadata": "read"}
        self.add_user(self.bot, "write")

    def _handle(self, request: Request) -> Response:
        bearer = request.headers.get("Authorization", "").split(" ")[-1]
        path = request.path[len(PREFIX):] if request.path.startswith(PREFIX) else ""
        op = self.spec.operation(request.method, path)
        if self.state.tokens.get(bearer) == JWT_LOGIN:  # a JWT is checked afresh on every use
            del self.state.tokens[bearer]
        if bearer.count(".") == 2:  # a JWT: only the App endpoints take one
            if not self._valid_jwt(bearer):
                return self._json(401, {"message": "A JSON web token could not be decoded"})
            if op is None or op.op_id not in APP_OPS:
                self.violations.append(f"JWT sent to {request.method} {path}")
                return self._json(401, {"message": "JWT is not accepted here"})
            self.state.tokens[bearer] = JWT_LOGIN
        elif bearer in self.expiry and self.expiry[bearer] <= datetime.now(timezone.utc):
            self.violations.append("an expired installation token was sent")
            return self._json(401, {"message": "Bad credentials"})
        elif op is not None and op.op_id in APP_OPS:
            return self._json(401, {"message": "A JSON web token is required"})
        return super()._handle(request)

    def _valid_jwt(self, token: str) -> bool:
        try:
            claims = jwt.decode(token, self._public, algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"]})
        except jwt.PyJWTError:
            return False
        # GitHub refuses a JWT valid for more than 10 minutes.
        return str(claims["iss"]) == str(self.app_id) and claims["exp"] - claims["iat"] <= 660

    # ---- operations --------------------------------------------------------------------------
    def _op_apps_get_authenticated(self, login: str, p: dict[str, str], body: Any,
                                   args: Any) -> Any:
        doc = self.spec.example("integration")
        doc.update({"id": self.app_id, "slug": self.slug})
        return 200, doc, None

    def _op_apps_get_repo_installation(self, login: str, p: dict[str, str], body: Any,
                                       args: Any) -> Any:
        if f"{p['owner']}/{p['repo']}" != REPO:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, None
        doc = self.spec.example("installation")
        doc.update({"id": self.installation, "app_id": self.app_id, "app_slug": self.slug,
                    "permissions": dict(self.grants)})
        return 200, doc, None

    def _op_apps_create_installation_access_token(self, login: str, p: dict[str, str],
                                                  body: Any, args: Any) -> Any:
        if int(p["installation_id"]) != self.installation:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, None
        token = "ghs_" + secrets.token_hex(18)
        expires = datetime.now(timezone.utc).replace(microsecond=0) + self.token_lifetime
        self.expiry[token] = expires
        self.minted.append(token)
        self.state.tokens[token] = self.bot
        doc = self.spec.example("installation-token")
        doc.update({"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "permissions": dict(self.grants)})
        doc.pop("repositories", None)
        return 201, doc, None

    def _op_users_get_authenticated(self, login: str, p: dict[str, str], body: Any,
                                    args: Any) -> Any:
        if login == self.bot:
            # An installation token may not read /user (GitHub: "Resource not accessible").
            return 403, {"message": "Resource not accessible by integration",
                         "documentation_url": "https://docs.github.com/rest"}, None
        doc = self.spec.example("private-user-response-with-public-and-private-profile-information")
        doc["login"] = login
        doc["user_view_type"] = "private"  # the response schema's discriminator needs it
        return 200, doc, None

    def _op_repos_get(self, login: str, p: dict[str, str], body: Any, args: Any) -> Any:
        if f"{p['owner']}/{p['repo']}" != REPO:
            return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, None
        doc = self.spec.example("full-repository-default-response")
        for part in (doc, doc.get("source"), doc.get("parent")):
            if isinstance(part, dict):
                part.setdefault("language", None)  # required by the schema, absent in the example
        perm = self.state.permissions.get(login, "none")
        doc["full_name"] = REPO
        doc["permissions"] = {"pull": perm != "none", "push": perm in ("write", "admin"),
                              "admin": perm == "admin"}
        return 200, doc, None
