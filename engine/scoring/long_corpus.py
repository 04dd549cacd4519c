"""The long-context text: the shipped corpus's paragraphs, generated into one long document.

The shipped corpus is about 30k tokens, too short for one window at the 32k-128k contexts the
profiles benchmark. Long windows are cut from this text instead: SECTIONS sections, each the
corpus's paragraphs in an order of its own (a fixed seed per section, so the text, its version and
every cached reference are the same on every box), headed `[section i]`.

What it measures: deep in a window, the text being predicted is a paragraph the window has
already seen many thousand tokens earlier (in another order, among others). A model that
attends correctly over the whole KV cache recalls it; an engine whose attention, KV cache or
position encoding breaks beyond some depth loses exactly those predictions. Scored positions sit
at the end of each long window (`long_score_tokens`), so they are at the benchmarked depth.
About 1.3 MB: some 400k Qwen-style tokens, a dozen windows of 32k or three of 128k.
"""

from __future__ import annotations

import hashlib
import random

SECTIONS = 12
RECIPE = "evalbot-long/1"  # bump when the generation below changes: it is part of the version


def long_text(corpus: bytes) -> tuple[bytes, str]:
    """The long document generated from `corpus`, and its version (a hash of the result)."""
    paragraphs = [p.strip(b"\n") for p in corpus.split(b"\n\n") if p.strip()]
    parts = []
    for section in range(SECTIONS):
        order = random.Random(f"{RECIPE}:{section}").sample(paragraphs, len(paragraphs))
        parts.append(f"[section {section + 1}]\n".encode() + b"\n\n".join(order))
    text = b"\n\n".join(parts) + b"\n"
    return text, hashlib.sha256(RECIPE.encode() + b"\0" + text).hexdigest()[:16]
