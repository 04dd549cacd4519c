"""A failure as it may be published: a fixed sentence, never the bytes behind it (issue 45).

The harness records each failure with its stage, side, kind and attribution (fixed words) and a
message that can quote what a run printed: a parse error quotes the PR's output, a crash names
its exit status (a number the PR chooses), a wall-time check quotes figures from its printed
rates. None of that is published: the sentence comes from the fixed words alone, plus a note the
harness or the bot adds in words of its own (the box's disk is full, the bot gave up after N
attempts). The raw message and the log tail stay in the operator's results and store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SIDES = ("base", "head", "harness")
STAGES = ("prepare", "checkout", "build", "speed", "score", "harness")
KINDS = ("build-failed", "crashed", "timeout", "spoofed", "infra-error")
WHOSE = {"head": "the PR's", "base": "main's", "harness": "the harness's"}
STEPS = {"prepare": "preparation", "checkout": "checkout", "build": "build",
         "speed": "timed run", "score": "score run", "harness": "run"}
PR_OUTCOMES = {
    "build-failed": "failed",
    "crashed": "failed or printed nothing the harness could read",
    "timeout": "ran past its time limit",
    # engine/measure/speed.py `_check_timing`: tokens / printed rate summed over the run's
    # cells came to more seconds than the harness timed its process
    "spoofed": ("printed rates that imply more seconds of work than its process ran, by the "
                "harness's clock"),
}
# The bot's and the harness's own reasons for an infrastructure failure, by what they say:
# (what the text contains, the sentence published). The first that matches wins.
INFRA = (
    ("disk is full", "the box's disk is full"),
    ("Disk quota exceeded", "the box's disk is full"),
    ("cannot resolve main", "the bot cannot resolve main on the box (its `repo`)"),
    ("is busy", "the box is busy with another evaluation"),
    ("cannot take its lock", "the bot cannot take the box's lock"),
    ("connection lost", "the connection to the box was lost"),
    ("host key", "the box's host key is not the pinned one"),
    ("authentication refused", "the box refused the bot's key"),
    ("does not match ours", "the harness copied to the box does not match the bot's"),
    ("exited without writing its results", "the harness exited without writing its results"),
    ("did not finish within", "the harness ran past the job's time limit"),
    ("results file from the box is invalid", "the results file from the box is invalid"),
    ("grading failed", "grading failed"),
    ("lost its worker", "the evaluation lost its worker"),
)
# The sandbox's caps a run went past (engine/sandbox/caps.py), by the harness's words: the
# sentence names the cap, not its size (the profile's, public; no digit of the message is
# published, so no digit a run could put there is)
CAPS = ("wrote more than its disk cap", "went past its memory cap")
_WORD = re.compile(r"[a-z][a-z-]{0,23}")
_GAVE_UP = re.compile(r"\(gave up after (\d+) attempts\)")
_GRADING = re.compile(r"grading failed \(([A-Z][A-Za-z]*Error)\)")  # the bot's exception type


def _word(value: Any, known: tuple[str, ...], default: str) -> str:
    """One of the harness's fixed words (a later harness may add some: the results contract
    checks them on fetch), else the default; never free text."""
    ok = isinstance(value, str) and (value in known or _WORD.fullmatch(value) is not None)
    return value if ok else default


def failure_text(failure: Mapping[str, Any]) -> str:
    """The published sentence of one failure."""
    stage = _word(failure.get("stage"), STAGES, "harness")
    side = _word(failure.get("side"), SIDES, "harness")
    kind = _word(failure.get("kind"), KINDS, "infra-error")
    message = str(failure.get("message", ""))
    if failure.get("attribution") == "pr":
        outcome = next((cap for cap in CAPS if cap in message), PR_OUTCOMES.get(kind, "failed"))
        return f"the PR's {STEPS.get(stage, stage)} {outcome}"
    said = next((text for needle, text in INFRA if needle in message or text in message), "")
    if (graded := _GRADING.search(message)) is not None:
        said = graded.group(0)
    if side == "harness" or stage == "harness":
        text = said or "the box, the connection or the harness failed"
    else:
        timed_out = kind == "timeout" or message.endswith("timeout") or any(
            word in message for word in ("timed out", "exceeded"))
        what = "timed out" if timed_out else "failed"
        text = f"{WHOSE.get(side, 'the')} {STEPS.get(stage, stage)} {what}" + (
            f" ({said})" if said else "")
    gave_up = _GAVE_UP.search(message)
    return f"{text} (gave up after {gave_up.group(1)} attempts)" if gave_up else text


def public_failure(failure: Mapping[str, Any]) -> dict[str, Any]:
    """A failure record as published: its fixed words, the sentence, no log tail."""
    return {"stage": _word(failure.get("stage"), STAGES, "harness"),
            "side": _word(failure.get("side"), SIDES, "harness"),
            "attribution": "pr" if failure.get("attribution") == "pr" else "infra",
            "kind": _word(failure.get("kind"), KINDS, "infra-error"),
            "message": failure_text(failure), "log_tail": ""}


def reason_of(failure: Mapping[str, Any]) -> str:
    """The verdict's one reason for a failure, in grading's form (`build of the PR: …`)."""
    if failure["attribution"] == "pr":
        return f"{failure['stage']} of the PR: {failure['message']}"
    return f"{failure['stage']} failed ({failure['side']}): {failure['message']}"
