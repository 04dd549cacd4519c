"""The evalbot harness: everything that runs on the GPU box (stdlib + numpy only)."""

__version__ = "0.1.0"
