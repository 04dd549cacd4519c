"""The error tree. Every EvalbotError is a user-facing, one-line message; the CLI exits 1 on it.

EvalbotError
  ConfigError      a config, profile or policy file is invalid (names the file, line and key)
  ResultsError     a results file is invalid or disagrees with its own recorded decisions
  PipelineError    an evaluation could not run (box unreachable, harness failed to start)

These three live here; the other subclasses live beside the code that raises them
(SignatureError, PayloadError, GitHubError and its Transient, Unauthorized, RateLimited, Busy).
The whole tree, each class with when it is raised and what the user sees: docs/architecture.md,
"The error tree" (tests/test_docs_modules.py holds the page to the sources).
"""

from __future__ import annotations


class EvalbotError(Exception):
    """Base of every error evalbot explains to its user."""


class ConfigError(EvalbotError):
    pass


class ResultsError(EvalbotError):
    pass


class PipelineError(EvalbotError):
    pass
