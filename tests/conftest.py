"""Fixtures shared by several test modules."""

from tests.sshd import sshd

__all__ = ["sshd"]
