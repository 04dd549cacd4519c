"""How the bot reaches a box: the Box interface, a local box, an SSH box."""

from evalbot.remote.box import Box, BoxError, ConnectionLost, Detached, RunResult
from evalbot.remote.local import LocalBox
from evalbot.remote.ssh import SSHBox, SSHTarget

__all__ = ["Box", "BoxError", "ConnectionLost", "Detached", "LocalBox", "RunResult", "SSHBox", "SSHTarget"]
