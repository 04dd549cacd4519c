"""How numbers read in published text: one interval notation, proportions kept inside [0, 1].

Every interval is written `[lo, hi]`. A proportion (top-1 agreement) gets a Wilson score interval,
which never leaves [0, 1]; the scorer's own interval is clustered by window (tokens of one window
are correlated), so its width is kept: the Wilson interval is taken at the effective sample size
that clustered interval implies (n_eff = p(1-p) z² / h², in which z cancels). A difference of two
proportions gets Newcombe's square-and-add interval of the two Wilson intervals (inside [-1, 1]).
"""

from __future__ import annotations

import math
import re

Z_DEGENERATE = 2.576  # where every token agreed (no spread to size n_eff): 99% on the token count


SIGNIFICANT = 3  # what a published number the PR's runs can steer keeps (report/publication.py)
_DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+)(e[-+]?\d+)?(?![\w.])")


def sig(x: float, digits: int = SIGNIFICANT) -> float:
    """x to `digits` significant digits (0 and non-finite values as they are)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def steerable(x: object) -> float | None:
    """A number the head's runs can steer, as it may be published: 3 significant digits, None
    where it is not a finite number (JSON has no infinity)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return sig(float(x))


def round_text(text: str) -> str:
    """Every decimal number in a text to 3 significant digits (integers are left as they are)."""
    def one(m: re.Match[str]) -> str:
        value = float(m.group(1))
        if value == 0 or len(m.group(1).replace(".", "").lstrip("0")) <= SIGNIFICANT:
            return m.group(0)  # nothing past the third digit to take away
        places = max(0, SIGNIFICANT - 1 - int(math.floor(math.log10(value))))
        return f"{round(value, places):.{places}f}{m.group(2) or ''}"
    return _DECIMAL.sub(one, text)


def pct(x: float | None, digits: int = 1) -> str:
    """A relative change: +6.0%, −18.9% (a real minus sign), n/a when missing."""
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{100 * x:+.{digits}f}%"
    return text.replace("-", "−")


def interval(lo: float | None, hi: float | None) -> str:
    return f"[{pct(lo)}, {pct(hi)}]"


def signed(x: float, fmt: str) -> str:
    return format(x, fmt).replace("-", "−")


def rate(x: float | None, unit: str) -> str:
    """A speed as people write it: 586 tok/s, 41,684 tok/s (no false precision past 3 digits)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
    return f"{text} {unit}"


def p_value(p: float | None) -> str:
    """A p-value is never 0: below 0.001 it reads `< 0.001`."""
    if p is None or not math.isfinite(p):
        return "n/a"
    return "< 0.001" if p < 1e-3 else f"{p:.2g}"


def wilson(p: float, lo: float, hi: float, n: int) -> tuple[float, float]:
    """A Wilson interval for the proportion p whose clustered interval is [lo, hi] over n tokens."""
    p = min(1.0, max(0.0, p))
    h = max(0.0, (hi - lo) / 2)
    var = p * (1 - p)
    if var > 0 and h > 0:
        k = h * h / var  # z² / n_eff
    else:
        k = Z_DEGENERATE ** 2 / max(1, n)
    centre = (p + k / 2) / (1 + k)
    half = math.sqrt(k * var + k * k / 4) / (1 + k)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(p_base: float, ci_base: tuple[float, float], p_head: float,
             ci_head: tuple[float, float]) -> tuple[float, float]:
    """Square-and-add interval of p_head - p_base from the two Wilson intervals."""
    d = p_head - p_base
    lo = d - math.sqrt((p_head - ci_head[0]) ** 2 + (ci_base[1] - p_base) ** 2)
    hi = d + math.sqrt((ci_head[1] - p_head) ** 2 + (p_base - ci_base[0]) ** 2)
    return max(-1.0, lo), min(1.0, hi)


def sparkline(values: list[float]) -> str:
    """Main's recent levels as block characters (one per level), empty under two levels."""
    if len(values) < 2:
        return ""
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(values), max(values)
    if high - low <= 1e-9 * max(abs(high), 1.0):
        return bars[3] * len(values)
    return "".join(bars[round((v - low) / (high - low) * (len(bars) - 1))] for v in values)
