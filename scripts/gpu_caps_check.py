"""Do the sandbox's memory caps leave CUDA working? (docs/box.md "Memory caps on a GPU box")

Runs on a GPU box as root: CUDA under each process's RLIMIT_DATA at the GPU profiles' run cap,
a host allocation past that cap refused, and CUDA inside a capped memory cgroup of the
harness's own kind (engine/sandbox/memory_cap.py) with the OOM killer stopping a host
allocation past it. Prints one line a check."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.sandbox import memory_cap  # noqa: E402

MB = 1 << 20
CUDA = ("import torch; x = torch.ones(1 << 30, device='cuda'); torch.cuda.synchronize();"
        "print('cuda ok', torch.cuda.get_device_name(), float(x.sum()))")
HOST = "import numpy as np; a = np.ones({n} * (1 << 20), dtype=np.uint8); print('host ok', a.sum())"


def child(code: str, data_mb: int | None, group: Path | None = None) -> str:
    def limit() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        if data_mb is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data_mb * MB, data_mb * MB))
    done = subprocess.run([sys.executable, "-c", code], preexec_fn=limit, capture_output=True,
                          text=True, timeout=120)
    tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    return f"rc={done.returncode} {tail[0][:160]}"


def main() -> None:
    print("probe:", memory_cap.probe())
    print("RLIMIT_DATA 32768 MB, CUDA 4 GiB:", child(CUDA, 32768))
    print("RLIMIT_DATA 32768 MB, host 40000 MB:", child(HOST.format(n=40000), 32768))
    root = next((r for r in memory_cap.V2 if (r / "cgroup.controllers").exists()), None)
    group_path = root / memory_cap.PARENT / "caps-check" if root else None
    if group_path is not None:
        group_path.mkdir(parents=True, exist_ok=True)
    group = memory_cap.MemoryGroup.make(6144 * MB, group_path)
    if group is None:
        print("memory cgroup: not available here")
        return
    print(f"cgroup v{group.version} 6144 MB, CUDA 4 GiB:", child(CUDA, None, group.path))
    print(f"cgroup v{group.version} 6144 MB, host 8000 MB:", child(HOST.format(n=8000), None, group.path),
          "oom_killed:", group.oom_killed())
    group.remove()


if __name__ == "__main__":
    main()
