"""The one summary of a GPU run, rewritten after every stage: summary.json and summary.md.

Per evaluation (EVAL/NAME.results.json and NAME.verdict.json, as the chain leaves them and as the
fixtures under tests/data/ keep them): the verdict against the one it must get, the tier, the
cells that moved, the box time per stage, the correctness seconds of the reference, main and the
PR, whether the reference's windows came from a warmed grid or were scored cold, and each side's
top-1 agreement with the reference (short and deep positions apart). Per set-up stage: its
seconds and how it ended (stages.json, the chain's record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpu_runner.catalogue import Evaluation

TIERS = {"eval:XL", "eval:L", "eval:M", "eval:S", "eval:XS"}
CAUGHT = ("regressed", "unconfirmed", "spoofed")  # a cell the bot did not believe unchanged
PRIVATE_RESULTS = ("private/results.json", "results.json")


def judge(expected: str, verdict: dict[str, Any]) -> bool:
    """Whether a verdict is the one the evaluation must get (catalogue.py lists the forms)."""
    headline = verdict.get("headline")
    if headline == "eval:infra-error":
        return False
    cells = verdict.get("cells") or []
    decision = (verdict.get("correctness") or {}).get("decision")
    if expected == "tier":
        return headline in TIERS
    if expected == "no tier":
        return headline not in TIERS
    if expected == "neutral":
        return headline == "eval:none" and all(c["decision"] == "neutral" for c in cells)
    if expected == "pass":
        return decision not in ("reject", "infra-error", None) and headline != "eval:REJECT"
    if expected == "measured":
        return True
    if expected.startswith("regressed:"):
        cell = expected.split(":", 1)[1]
        moved = {c["key"].split("/")[-1]: c["decision"] for c in cells}
        return moved.get(cell) == "regressed" and "improved" not in moved.values()
    if expected.startswith("caught:"):
        cell = expected.split(":", 1)[1]
        moved = {c["key"].split("/")[-1]: c["decision"] for c in cells}
        return moved.get(cell) in CAUGHT and headline not in (*TIERS, "eval:none")
    return headline == expected


def targets(expected: str, total: float | None, corr: dict[str, Any] | None) -> list[str]:
    """The verdict-cost issue's targets (44: a warmed reference, main's build cached): an A/A in
    4 minutes, an honest tier in 8, correctness of both sides in 60 s; each met or over."""
    said = []
    limit = {"eval:none": 240, "neutral": 240, "tier": 480}.get(expected)
    if limit and total is not None:
        said.append(f"total {total:.0f}s {'<=' if total <= limit else 'OVER'} {limit}s")
    sides = [(corr or {}).get("seconds", {}).get(k) for k in ("main", "pr")]
    if corr and None not in sides:
        both = sum(s for s in sides if s is not None)
        said.append(f"correctness {both:.0f}s {'<=' if both <= 60 else 'OVER'} 60s")
    return said


def grid(corr: dict[str, Any]) -> str:
    """How the reference's windows came: all from the warmed (or earlier) cache, all scored now,
    or some of each."""
    ref = corr.get("reference") or {}
    cached, scored = int(ref.get("cached") or 0), int(ref.get("scored") or 0)
    if scored == 0 and cached > 0:
        return "warm"
    if cached == 0:
        return "cold"
    return f"partly warm ({cached} cached, {scored} scored)"


def agreement(corr: dict[str, Any]) -> dict[str, dict[str, float | int]]:
    """Each side's top-1 agreement with the reference, short and deep positions apart."""
    out: dict[str, dict[str, float | int]] = {}
    for kind in ("short", "deep"):
        rows = [c for c in corr.get("chunks") or [] if c["kind"] == kind]
        n = sum(c["positions"] for c in rows)
        if n:
            out[kind] = {"positions": n, "main": round(sum(c["base_top1"] for c in rows) / n, 4),
                         "pr": round(sum(c["head_top1"] for c in rows) / n, 4)}
    return out


def row(evaluation: Evaluation, results: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    from evalbot.grading.box_time import box_time

    t = box_time(results)
    out: dict[str, Any] = {
        "name": evaluation.name, "base": evaluation.base, "head": evaluation.head,
        "expected": evaluation.expected, "headline": verdict.get("headline"), "tier": verdict.get("tier"),
        "ok": judge(evaluation.expected, verdict),
        "moved": [f"{c['key']} {c['decision']}"  # model/cell: a head must move only its model's
                  + (f" ({c['confirmation']})" if c.get("confirmation") not in (None, "no witness") else "")
                  for c in verdict.get("cells") or [] if c["decision"] != "neutral"],
        "box_time_s": {"total": t.total_s, **t.stages},
        "correctness": None}
    corr = results.get("correctness")
    if corr:
        seconds = corr.get("seconds") or {}
        out["correctness"] = {
            "decision": (verdict.get("correctness") or {}).get("decision"),
            "seconds": {"reference": seconds.get("reference"), "main": seconds.get("base"),
                        "pr": seconds.get("head")},
            "grid": grid(corr), "agreement": agreement(corr)}
    out["targets"] = targets(evaluation.expected, t.total_s, out["correctness"])
    return out


def raw_results(out: Path) -> Path | None:
    """An evaluation's raw results: out/private/results.json (docs/trust.md), else out/results.json."""
    return next((out / p for p in PRIVATE_RESULTS if (out / p).is_file()), None)


def build(folder: Path, evaluations: list[Evaluation], stages: dict[str, Any], run: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for e in evaluations:
        res, ver = folder / f"{e.name}.results.json", folder / f"{e.name}.verdict.json"
        if e.kind == "sandbox-ab":
            ab = folder / "sandbox-ab.txt"
            rows.append({"name": e.name, "expected": e.expected, "ok": ab.is_file(),
                         "headline": "measured" if ab.is_file() else "not run",
                         "table": ab.read_text() if ab.is_file() else None})
        elif e.kind == "witness-aa":
            floors = folder / e.name / "floors.json"
            rows.append({"name": e.name, "expected": e.expected, "ok": floors.is_file(),
                         "headline": "measured" if floors.is_file() else "not run",
                         "floors": json.loads(floors.read_text()) if floors.is_file() else None,
                         "stage": stages.get(f"eval:{e.name}")})
        elif res.is_file() and ver.is_file():
            rows.append(row(e, json.loads(res.read_text()), json.loads(ver.read_text())))
        else:
            rows.append({"name": e.name, "expected": e.expected, "ok": False,
                         "headline": "not run", "stage": stages.get(f"eval:{e.name}")})
    return {"run": run, "stages": stages, "evaluations": rows,
            "ok": all(r["ok"] for r in rows)}


def _s(value: Any) -> str:
    return "-" if value is None else f"{value:.0f}"


def markdown(summary: dict[str, Any]) -> str:
    lines = [f"# GPU run {summary['run']}", "", "| stage | state | seconds |", "|---|---|---:|"]
    lines += [f"| {name} | {s.get('state')} | {_s(s.get('seconds'))} |"
              for name, s in summary["stages"].items()]
    lines += ["", "| evaluation | verdict | want | ok | tier | moved | box time per stage (s) | "
              "correctness s: reference / main / PR | grid | top-1 main / PR (short; deep) | targets |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["evaluations"]:
        times = " ".join(f"{k} {_s(v)}" for k, v in (r.get("box_time_s") or {}).items() if v)
        corr = r.get("correctness") or {}
        secs = corr.get("seconds") or {}
        aims = "; ".join(r.get("targets") or []) or "-"
        agree = "; ".join(f"{k} {a['main']:.1%} / {a['pr']:.1%}"
                          for k, a in (corr.get("agreement") or {}).items())
        lines.append(f"| {r['name']} | {r['headline']} | {r['expected']} | {'yes' if r['ok'] else 'NO'} | "
                     f"{r.get('tier') or '-'} | {', '.join(r.get('moved') or []) or '-'} | {times or '-'} | "
                     + (f"{_s(secs.get('reference'))} / {_s(secs.get('main'))} / {_s(secs.get('pr'))} "
                        f"({corr.get('decision')})" if corr else "-")
                     + f" | {corr.get('grid') or '-'} | {agree or '-'} | {aims} |")
    floors = [f"- {r['name']}: witness {w} floor {sd:.4f} s over {n} pairs"
              for r in summary["evaluations"] for w, (sd, n) in (r.get("floors") or {}).items()]
    lines += ["", *floors] if floors else []
    return "\n".join(lines) + "\n"


def write(work: Path, evaluations: list[Evaluation], run: str) -> dict[str, Any]:
    stages_file = work / "stages.json"
    stages = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    summary = build(work / "eval", evaluations, stages, run)
    (work / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (work / "summary.md").write_text(markdown(summary))
    return summary
