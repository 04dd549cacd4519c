"""The job's `sandbox` object, validated where the job is parsed (engine.contract.job).

Kept apart from engine.sandbox.session, which applies the sandbox and reads the job: the job's
parser needs only this check, so the two modules do not import each other.
"""

from __future__ import annotations

from typing import Any

from .checks import ContractError

STAGES = ("build", "run")
_KEYS = {"user", "hostname", "network", "launcher", "limits", "gpu_idle_timeout_s"}
# The launcher's rlimits, then what the harness applies around a run (engine/sandbox/session.py):
# its memory cap (RLIMIT_DATA, and a memory cgroup where it may make one), its private tmpfs
# mounts' size, and how much it may add to the job directory's disk.
RLIMIT_KEYS = ("as_mb", "data_mb", "nproc", "fsize_mb", "nofile")
_LIMIT_KEYS = {*RLIMIT_KEYS, "memory_mb", "tmpfs_mb", "disk_mb"}


def check_spec(doc: Any) -> dict[str, Any] | None:
    """Validate the job's `sandbox` object (None: no sandbox, for a trusted local box)."""
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ContractError("sandbox: expected an object")
    unknown = set(doc) - _KEYS
    if unknown:
        raise ContractError(f"sandbox: unknown key(s) {', '.join(sorted(unknown))}")
    if not isinstance(doc.get("user"), str) or not doc["user"]:
        raise ContractError("sandbox.user: expected the sandbox user's name")
    launcher = doc.get("launcher", [])
    if not isinstance(launcher, list) or not all(isinstance(a, str) for a in launcher):
        raise ContractError("sandbox.launcher: expected a list of strings")
    check_limits(doc.get("limits"), "sandbox.limits")
    return dict(doc)


def check_limits(doc: Any, where: str) -> dict[str, dict[str, int]]:
    """Per stage (build, run), positive integer limits of the known keys."""
    if not isinstance(doc or {}, dict):
        raise ContractError(f"{where}: expected an object of stages")
    for stage, limits in (doc or {}).items():
        if stage not in STAGES or not isinstance(limits, dict):
            raise ContractError(f"{where}.{stage}: expected one of {', '.join(STAGES)}")
        for key, value in limits.items():
            if key not in _LIMIT_KEYS or isinstance(value, bool) or not isinstance(value, int) \
                    or value <= 0:
                raise ContractError(f"{where}.{stage}.{key}: expected a positive integer "
                                    f"limit, one of {', '.join(sorted(_LIMIT_KEYS))}")
    return {stage: dict(limits) for stage, limits in (doc or {}).items()}
