"""Webhook secret rotation: accept the new secret and, until a deadline, the old one.

The secrets come from the environment, never from the config file:
    NAME                   the current secret (NAME is the config's github.webhook_secret_env)
    NAME_PREVIOUS          the secret being retired (optional)
    NAME_PREVIOUS_UNTIL    when it stops being accepted: ISO 8601 with a zone, or unix seconds
The ring is asked at every delivery, so the old secret stops working at the deadline without a
restart. A previous secret without a deadline is refused: a rotation that never ends is a leak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from evalbot.config.errors import ConfigError

MAX_WINDOW_S = 30 * 86400.0  # a longer overlap is almost certainly a forgotten rotation


@dataclass(frozen=True)
class SecretRing:
    current: bytes
    previous: bytes | None = None
    previous_until: float | None = None  # unix seconds
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def accepted(self) -> list[bytes]:
        """The secrets a delivery may be signed with right now, the current one first."""
        out = [self.current]
        if self.previous and self.previous_until is not None and \
                self.clock() < self.previous_until:
            out.append(self.previous)
        return out

    def describe(self) -> str:
        """For logs and `evalbot doctor`: never the secrets, only the state of the rotation."""
        if self.previous is None or self.previous_until is None:
            return "one webhook secret"
        left = self.previous_until - self.clock()
        if left <= 0:
            return "one webhook secret (the previous one expired; remove it from the environment)"
        return f"two webhook secrets: the previous one is accepted for {left / 3600:.1f} more h"


def parse_deadline(text: str, name: str) -> float:
    value = text.strip()
    if value.replace(".", "", 1).isdigit():
        return float(value)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(f"{name}={value!r}: not an ISO 8601 time or unix seconds") from exc
    if when.tzinfo is None:
        raise ConfigError(f"{name}={value!r}: give a time zone (e.g. 2026-12-01T00:00Z)")
    return when.timestamp()


def ring_from_env(environ: Mapping[str, str], name: str,
                  clock: Callable[[], float] = time.time) -> SecretRing:
    """The ring for the config's webhook secret variable `name`; errors name the variable."""
    current = environ.get(name, "")
    if not current:
        raise ConfigError(f"environment variable {name} (named in the config) is not set")
    previous = environ.get(f"{name}_PREVIOUS", "")
    until_text = environ.get(f"{name}_PREVIOUS_UNTIL", "")
    if not previous:
        if until_text:
            raise ConfigError(f"{name}_PREVIOUS_UNTIL is set but {name}_PREVIOUS is not")
        return SecretRing(current.encode(), clock=clock)
    if previous == current:
        raise ConfigError(f"{name}_PREVIOUS equals {name}: nothing is being rotated")
    if not until_text:
        raise ConfigError(f"{name}_PREVIOUS needs {name}_PREVIOUS_UNTIL: when the old secret "
                          "stops being accepted")
    until = parse_deadline(until_text, f"{name}_PREVIOUS_UNTIL")
    if until - clock() > MAX_WINDOW_S:
        raise ConfigError(f"{name}_PREVIOUS_UNTIL is more than {MAX_WINDOW_S / 86400:.0f} days "
                          "away; finish the rotation sooner")
    return SecretRing(current.encode(), previous.encode(), until, clock)
