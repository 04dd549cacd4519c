"""The GPU session's scripts (scripts/gpu_sparkinfer.sh) run each stage in a fresh bash
(`bash -c stage_NAME`), which sees only exported variables: a top-level setting a stage reads but
the script does not export is silently empty there. The 2026-12-06 run lost its stable Qwythos
file that way (STABLE_SYNTH: docs/gpu-e2e.md, "A verdict in minutes, second run")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _stage_reads(text: str) -> set[str]:
    bodies = re.findall(r"^stage_\w+\(\) \{.*?^\}", text, flags=re.S | re.M)
    return {m for body in bodies for m in re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", body)}


def _top_level(text: str) -> tuple[set[str], set[str]]:
    """Names the script sets outside any function, and the names it exports."""
    outside = re.sub(r"^\w+\(\) \{.*?^\}", "", text, flags=re.S | re.M)
    assigned = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", outside, flags=re.M))
    exported = {name.split("=")[0] for line in re.findall(r"^export (.*)$", outside, flags=re.M)
                for name in line.split() if re.match(r"[A-Z_][A-Z0-9_]*(=|$)", name)}
    return assigned, exported


@pytest.mark.parametrize("script", ["gpu_sparkinfer.sh"])
def test_every_setting_a_stage_reads_is_exported(script: str) -> None:
    text = (SCRIPTS / script).read_text()
    assigned, exported = _top_level(text)
    reads = _stage_reads(text)
    assert "STABLE_SYNTH" in reads and reads & assigned  # the parse sees the stages
    assert sorted((reads & assigned) - exported) == []
