"""GPU state per sample, read with nvidia-smi when the box has one (no NVML binding needed)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

_FIELDS = (
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
    "clocks_throttle_reasons.active",
)
# Reasons that distort a sample: thermal or power slowdown. Idle (0x1) and application
# clock settings (0x2) are normal, so they do not mark a sample throttled.
_DISTORTING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def gpu_state() -> dict[str, Any] | None:
    """The first GPU's clocks, temperature, power and throttle reasons; None without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    values = [v.strip() for v in first.split(",")]
    if len(values) != len(_FIELDS):
        return None
    state: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
    reasons = _int(state.get("clocks_throttle_reasons.active", ""))
    state["throttled"] = bool(reasons is not None and reasons & _DISTORTING)
    return state


def _int(text: str) -> int | None:
    try:
        return int(text, 16) if text.startswith("0x") else int(text)
    except ValueError:
        return None
