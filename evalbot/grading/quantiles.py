"""The few distribution functions the bot's statistics need, from scipy.special.

Every bot process that grades imports these. scipy.stats costs about 1.5 s of CPU to import;
scipy.special, where its t, normal and F functions come from, costs 0.5 s. The values are the
same: scipy.stats computes them with these functions.
"""

from __future__ import annotations

from scipy import special


def t_isf(q: float, df: float) -> float:
    """The t quantile with an upper tail of q (scipy.stats.t.isf)."""
    return float(-special.stdtrit(df, q))


def t_ppf(p: float, df: float) -> float:
    """The t quantile with a lower tail of p (scipy.stats.t.ppf)."""
    return float(special.stdtrit(df, p))


def norm_isf(q: float) -> float:
    """The standard normal quantile with an upper tail of q (scipy.stats.norm.isf)."""
    return float(-special.ndtri(q))


def f_isf(q: float, dfn: float, dfd: float) -> float:
    """The F quantile with an upper tail of q (scipy.stats.f.isf)."""
    return float(special.fdtri(dfn, dfd, 1.0 - q))


def f_sf(x: float, dfn: float, dfd: float) -> float:
    """P(F > x) (scipy.stats.f.sf)."""
    return float(special.fdtrc(dfn, dfd, x))
