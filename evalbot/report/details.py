"""The folded details of a PR comment: samples, GPU state, noise, builds.

Each section is optional: `render_comment` drops the bulkiest ones first when a comment would
pass GitHub's size limit, so the verdict itself is never trimmed.
"""

from __future__ import annotations

from typing import Any

from evalbot.grading.grade import ctx_name

# Sections in the order they are dropped when the comment is too long.
DROP_ORDER = ("samples", "gpu", "noise", "builds")


def details(verdict: dict[str, Any], results: dict[str, Any] | None) -> dict[str, str]:
    """Markdown per section; a section with nothing to say is left out."""
    out = {
        "samples": _samples(results) if results else "",
        "gpu": _gpu(verdict, results),
        "noise": _noise(verdict, results),
        "builds": _builds(verdict),
    }
    return {k: v for k, v in out.items() if v}


def _cell_name(cell: dict[str, Any]) -> str:
    return f"{cell['model']} {cell['metric']} @ {ctx_name(cell['ctx'])}"


def _samples(results: dict[str, Any]) -> str:
    """Main's samples in measured order: the PR's are never shown (its believed level is the
    table's; evalbot/report/publication.py)."""
    throttles = bool((results.get("box") or {}).get("gpu_start"))  # a CPU box drops no pair
    legend = " (~ marks a dropped, throttled pair)" if throttles else ""
    lines = [f"Main's samples in measured order, one per pair{legend}; "
             "the PR's samples are not published:", ""]
    for cell in results["cells"]:
        text = ", ".join(f"{'~' if s['dropped'] else ''}{_num(s['value'])}"
                         for s in sorted(cell["samples"], key=lambda s: s["pair"])
                         if s.get("side", "base") == "base")
        lines.append(f"- {_cell_name(cell)} ({cell.get('unit', 'tok/s')}): {text or '-'}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def _gpu(verdict: dict[str, Any], results: dict[str, Any] | None) -> str:
    box = verdict["provenance"].get("box") or {}
    start, end = box.get("gpu_start"), box.get("gpu_end")
    lines = [f"- box: `{box.get('name') or 'unnamed'}`"]
    if not start:
        lines.append(f"- no GPU reported; {box.get('machine', '?')} with {box.get('cpus', '?')} "
                     f"CPUs, Python {box.get('python', '?')}")
    else:
        lines.append(f"- {start.get('name')} (driver {start.get('driver_version')})")
        for label, state in (("start", start), ("end", end or {})):
            if state:
                lines.append(f"- at {label}: SM {state.get('clocks.sm')} MHz, memory "
                             f"{state.get('clocks.mem')} MHz, {state.get('temperature.gpu')} °C, "
                             f"{state.get('power.draw')} W, throttle reasons "
                             f"{state.get('clocks_throttle_reasons.active')}")
    if start:  # a box without a GPU has no throttling to drop pairs for: nothing to say
        dropped = [f"{c['key']}: {c['dropped_pairs']}" for c in verdict["cells"]
                   if c["dropped_pairs"]]
        lines.append("- pairs dropped for throttling: " + (", ".join(dropped) or "none"))
    return "\n".join(lines)


def _noise(verdict: dict[str, Any], results: dict[str, Any] | None) -> str:
    rule = verdict["provenance"]["rule"]
    pooled = f", weighed as {rule['pool_df']} degrees of freedom" if rule.get("pool_df") else ""
    lines = [f"- noise floor of the per-pair log-ratio (each cell's, with its source){pooled}:"]
    lines += [f"  - {c['key']}: {100 * c['sd_floor']:.2f}% ({c['floor_source']})"
              for c in verdict["cells"] if c.get("sd_floor") is not None]
    if not verdict["cells"]:
        lines = [f"- noise floor of the per-pair log-ratio: {100 * rule['sd_floor']:.2f}% "
                 "(the profile's)"]
    if results:
        for cell in results["cells"]:
            if cell["looks"]:
                sd = cell["looks"][-1].get("sd")
                if sd is not None:
                    lines.append(f"- {_cell_name(cell)}: measured sd {100 * sd:.2f}% over "
                                 f"{cell['looks'][-1]['pairs']} pairs")
    return "\n".join(lines)


def _builds(verdict: dict[str, Any]) -> str:
    builds = verdict["provenance"].get("builds") or {}
    lines = []
    for side, name in (("base", "main"), ("head", "PR")):
        b = builds.get(side) or {}
        if b:
            reused = " (reused a verified build of this SHA)" if b.get("cached") else ""
            lines.append(f"- {name}: {b.get('duration_s') or 0:.1f} s{reused}")
    return "\n".join(lines)
