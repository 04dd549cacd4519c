"""How the bot reaches a box: the Box interface, a local box, an SSH box."""

from remote.box import Box, BoxError, ConnectionLost, Detached, RunResult
from remote.local import LocalBox
from remote.ssh import SSHBox, SSHTarget

__all__ = ["Box", "BoxError", "ConnectionLost", "Detached", "LocalBox", "RunResult", "SSHBox", "SSHTarget"]
