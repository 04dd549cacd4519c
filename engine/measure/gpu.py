"""GPU state per sample, read with nvidia-smi when the box has one (no NVML binding needed).

Clock locking is opt-in per box (BoxConfig.lock_clocks, carried in the job's rule): the harness
locks the graphics clock at the card's default application clock (a clock it sustains, not the
boost peak) for the measurement and resets it afterwards. Where the driver refuses (no root,
a shared card), the card is measured as found and the results say so.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
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


def _smi(args: list[str]) -> tuple[bool, str]:
    """Run nvidia-smi; (succeeded, stdout or the error text)."""
    if shutil.which("nvidia-smi") is None:
        return False, "no nvidia-smi on this box"
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    if done.returncode != 0:
        return False, (done.stdout + done.stderr).strip()[-300:]
    return True, done.stdout


def gpu_state() -> dict[str, Any] | None:
    """The first GPU's clocks, temperature, power and throttle reasons; None without a GPU."""
    ok, out = _smi([f"--query-gpu={','.join(_FIELDS)}", "--format=csv,noheader,nounits"])
    if not ok:
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    values = [v.strip() for v in first.split(",")]
    if len(values) != len(_FIELDS):
        return None
    state: dict[str, Any] = dict(zip(_FIELDS, values, strict=True))
    reasons = _int(state.get("clocks_throttle_reasons.active", ""))
    state["throttled"] = bool(reasons is not None and reasons & _DISTORTING)
    return state


def device_identity() -> str:
    """What a reference scores on, for its cache key: the first GPU's name and driver version
    (two drivers, or CUDA and CPU builds of one reference, round differently), else the CPU's
    model. A box whose nvidia-smi is there but does not answer is "gpu unidentified": never
    taken for a CPU box, nor for a GPU of a known name."""
    if shutil.which("nvidia-smi") is None:
        return f"cpu {_cpu_model()}"
    ok, out = _smi(["--query-gpu=name,driver_version", "--format=csv,noheader"])
    first = out.strip().splitlines()[0].strip() if ok and out.strip() else ""
    return f"gpu {first or 'unidentified'}"


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [line.split(":", 1)[1].strip() for line in lines
             if line.split(":", 1)[0].strip() in ("model name", "Model", "cpu model")]
    return next((n for n in names if n), platform.machine() or "unknown")


def _int(text: str) -> int | None:
    try:
        return int(text, 16) if text.startswith("0x") else int(text)
    except ValueError:
        return None


def lock_clocks() -> tuple[bool, str]:
    """Lock the graphics clock at the default application clock; (locked, what happened)."""
    ok, out = _smi(["--query-gpu=clocks.default_applications.graphics",
                    "--format=csv,noheader,nounits"])
    target = _int(out.strip().splitlines()[0].strip()) if ok and out.strip() else None
    if target is None:
        return False, f"not locked: cannot read the default application clock ({out.strip()})"
    ok, out = _smi(["-lgc", f"{target},{target}"])
    if not ok:
        return False, f"not locked: the driver refused -lgc {target} ({out.strip()})"
    return True, f"locked at {target} MHz"


def reset_clocks() -> None:
    """Undo lock_clocks; a failure here only means the card keeps the locked clock."""
    _smi(["-rgc"])
