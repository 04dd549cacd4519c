"""The t, normal and F quantiles and the F tail the bot's statistics need, in the standard library.

These four functions were the only reason scipy (about 143 MB installed, with its libraries) was
in every install, and importing scipy.special cost every grading process about half a second of
CPU. They are computed here from the regularized incomplete beta function (its continued
fraction, by the modified Lentz method, with the B(a, b) prefactor from Stirling's series so that
large df lose no digits) and, for the normal quantile, statistics.NormalDist (Wichura's AS 241).
A quantile is the root of its tail probability: Newton's method on the logs of both, from Hill's
approximation (t) or Paulson's (F), with bisection inside proven bounds as the safeguard; near
the median the t quantile solves for P(|T| < t) instead, and above df 1e4 it is the Cornish-Fisher
expansion. tests/test_quantiles.py compares all four with scipy over the ranges evalbot uses and
beyond (t df 1 to 2000 and more, non-integer df, tails 1e-8 to 0.5, F df 1 to 500, F values 0 to
50): within 1e-10 relative, about 1e-14 in practice; an uncached call takes under 0.1 ms.

One deliberate difference: scipy.stats.f.isf(q) is fdtri(1 - q), which loses the digits of a small
q to 1 - q (1e-8 relative at q = 1e-8); f_isf solves for q itself. Where the callers use it
(q = 0.01) the two agree to 1e-15.

The callers round critical values to 6 digits and ask for the same few arguments many times (the
simulations in bench/ most of all): every function is cached.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

__all__ = ["f_isf", "f_sf", "norm_isf", "t_isf"]

_CACHE = 4096
_NORMAL = NormalDist()
_LOG_2PI = math.log(2 * math.pi)
_LOG_MAX = math.log(sys.float_info.max)
_TINY = 1e-300  # the Lentz method's stand-in for a zero denominator
_CF_EPS = 4e-16  # the continued fraction stops when a step changes it by about an ulp
_CF_MAX = 100_000  # steps; it takes O(sqrt(max(a, b))) near the switch point
_STEP_TOL = 1e-11  # a Newton step in log(quantile) this small leaves an error of about its square
_MAX_STEP = 4.0  # at most a factor e^4 per Newton step
_LARGE_DF = 1e4  # t quantiles beyond this df: the Cornish-Fisher expansion (exact to ~1e-15 there)


def _log(p: float) -> float:
    return math.log(p) if p > 0.0 else -math.inf


def _exp(v: float) -> float:
    return math.exp(v) if v < _LOG_MAX else math.inf  # math.exp raises where it overflows


def _exp_root(u: float) -> float:
    """A quantile from its log, infinite where the search ran into the end of the floats."""
    return _exp(u) if u < _LOG_MAX - 1e-9 else math.inf


def _check_tail(q: float) -> None:
    if not 0.0 < q < 1.0:  # also rejects NaN
        raise ValueError(f"tail probability {q!r} is not in (0, 1)")


def _check_df(name: str, df: float, finite: bool = True) -> None:
    if not (df > 0.0 and (math.isfinite(df) or not finite)):  # also rejects NaN
        raise ValueError(f"{name} {df!r} is not a positive{' finite' if finite else ''} "
                         "number of degrees of freedom")


def _stirling_rest(z: float) -> float:
    """lgamma(z) less Stirling's (z - 1/2) log z - z + log(2 pi) / 2."""
    if z >= 10.0:
        w = 1.0 / (z * z)
        return (1 / 12 + w * (-1 / 360 + w * (1 / 1260 + w * (-1 / 1680 + w * (
            1 / 1188 + w * (-691 / 360360 + w * (1 / 156 + w * (-3617 / 122400)))))))) / z
    return math.lgamma(z) - ((z - 0.5) * math.log(z) - z + 0.5 * _LOG_2PI)


def _log_scaled(x: float, y: float, a: float, b: float) -> float:
    """log(x (a + b) / a) for y = 1 - x: near 1 (x near the beta mean) from log1p."""
    d = (x * b - y * a) / a
    return math.log1p(d) if abs(d) < 0.5 else math.log(x) + math.log1p(b / a)


def _power(a: float, b: float, x: float, y: float) -> float:
    """x^a y^b / B(a, b) for x + y = 1, through Stirling's series: the large lgamma terms of
    B(a, b) cancel in closed form instead of in floating point (DiDonato and Morris; Boost's
    ibeta_power_terms)."""
    log_d = (a * _log_scaled(x, y, a, b) + b * _log_scaled(y, x, b, a)
             + 0.5 * (math.log(a * b / (a + b)) - _LOG_2PI)
             + _stirling_rest(a + b) - _stirling_rest(a) - _stirling_rest(b))
    return math.exp(log_d)


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf, modified Lentz): quick for
    x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _TINY:
        d = _TINY
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAX):
        m2 = 2 * m
        d, c = _lentz(m * (b - m) * x / ((qam + m2) * (a + m2)), d, c)
        h *= d * c
        d, c = _lentz(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)), d, c)
        step = d * c
        h *= step
        if abs(step - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta ({a}, {b}, {x}) did not converge")  # pragma: no cover


def _lentz(aa: float, d: float, c: float) -> tuple[float, float]:
    """One term aa of the continued fraction: the next 1/D and C, kept off zero."""
    d, c = 1.0 + aa * d, 1.0 + aa / c
    return 1.0 / (d if abs(d) >= _TINY else _TINY), (c if abs(c) >= _TINY else _TINY)


def _ibeta(a: float, b: float, x: float, y: float) -> tuple[float, float, float]:
    """I_x(a, b), its complement I_y(b, a) and x^a y^b / B(a, b), for x + y = 1 given both (so
    that neither loses digits to 1 - x). The continued fraction runs on the side where it
    converges; its complement is 1 less a value that is never near 1 there, so both keep
    their relative precision."""
    if x <= 0.0:
        return 0.0, 1.0, 0.0
    if y <= 0.0:
        return 1.0, 0.0, 0.0
    power = _power(a, b, x, y)
    if x * (a + b + 2.0) < a + 1.0:
        v = power * _beta_cf(a, b, x) / a
        return v, 1.0 - v, power
    v = power * _beta_cf(b, a, y) / b
    return 1.0 - v, v, power


def _newton(fn: Callable[[float], tuple[float, float]], target: float, u: float, lo: float,
            hi: float, rising: bool) -> float:
    """The root of fn(u)[0] = target in [lo, hi], fn(u) = (log G, d log G / du) for G monotone
    in u (rising or falling), from u: Newton's method, steps of at most _MAX_STEP, bisection when
    a step leaves the bracket."""
    for _ in range(400):
        g, slope = fn(u)
        r = g - target
        if r == 0.0:
            return u
        right = (r < 0.0) == rising
        if right:
            lo = u
        else:
            hi = u
        step = -r / slope if slope != 0.0 and math.isfinite(r) else math.nan  # nan: no tangent
        if abs(step) <= _STEP_TOL:  # what is left is about step^2
            return u + step
        nxt = u + max(-_MAX_STEP, min(_MAX_STEP, step)) if not math.isnan(step) else math.nan
        if not lo < nxt < hi:
            if math.isinf(hi - lo):  # no tangent, and no bound on the root's side
                nxt = u + (_MAX_STEP if right else -_MAX_STEP)
            else:
                nxt = 0.5 * (lo + hi)
                if hi - lo <= 4e-16 * max(1.0, abs(nxt)):
                    return nxt
        u = nxt
    raise ArithmeticError(f"quantile search did not converge near {u}")  # pragma: no cover


def _ibeta_tiny(a: float, b: float, log_x: float) -> tuple[float, float, float]:
    """_ibeta for x below 1e-280, given its log (x itself may underflow): I_x(a, b) is then
    x^a / (a B(a, b)) to double precision."""
    power = _exp(a * log_x + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))
    return power / a, 1.0 - power / a, power


def _t_parts(t: float, df: float) -> tuple[float, float, float]:
    """P(|T| > t), P(|T| < t) and t f(t) (f the density) for t > 0, from
    P(|T| > t) = I_x(df/2, 1/2), x = df / (df + t^2)."""
    if t <= 0.0:
        return 1.0, 0.0, 0.0
    r = df / t / t
    if r < 1e-280:
        return _ibeta_tiny(0.5 * df, 0.5, math.log(df) - 2.0 * math.log(t))
    return _ibeta(0.5 * df, 0.5, r / (1.0 + r), 1.0 / (1.0 + r))


def _t_guess(p2: float, df: float) -> float:
    """Hill's approximate t quantile (CACM algorithm 396, as in R's qt) for a two-sided tail p2."""
    a = 1.0 / (df - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2) * df
    y = (d * p2) ** (2.0 / df)
    if (df < 2.1 and p2 > 0.5) or y > 0.05 + a:
        x = _NORMAL.inv_cdf(0.5 * p2)
        y = x * x
        if df < 5:
            c += 0.3 * (df - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = a * y * y
        if y > 700.0:
            return math.inf
        y = math.expm1(y)
    elif y > 0.0:
        y = ((1.0 / (((df + 6.0) / (df * y) - 0.089 * d - 0.822) * (df + 2.0) * 3.0)
              + 0.5 / (df + 4.0)) * y - 1.0) * (df + 1.0) / (df + 2.0) + 1.0 / y
    else:
        return math.inf
    return math.sqrt(df * y)


def _t_expansion(z: float, df: float) -> float:
    """The Cornish-Fisher expansion of the t quantile about the normal z (Abramowitz and Stegun
    26.7.5), to 1/df^4."""
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


@lru_cache(maxsize=_CACHE)
def _t_upper(q: float, df: float) -> float:
    """The t quantile of upper tail q in (0, 1/2)."""
    if df == 1.0:  # Cauchy
        return 1.0 / math.tan(math.pi * q) if q < 0.25 else math.tan(math.pi * (0.5 - q))
    if df == 2.0:
        return 2.0 * (0.5 - q) / math.sqrt(2.0 * q * (1.0 - q))
    z = -_NORMAL.inv_cdf(q)  # a lower bound: t's tails are heavier
    if df > _LARGE_DF and z * z < 3e-3 * df:  # its terms fall by about z^2 / df
        return _t_expansion(z, df)
    # an upper bound: P(T > t) <= k t^-df, the integral of the density without its 1 in 1 + s^2/df
    log_k = (math.lgamma(0.5 * (df + 1.0)) - math.lgamma(0.5 * df)
             + (0.5 * df - 1.0) * math.log(df) - 0.5 * math.log(math.pi))
    lo, hi = math.log(z), (log_k - math.log(q)) / df
    guess = _t_guess(2.0 * q, df) if df >= 1.0 else 0.0
    u = math.log(guess) if z < guess < math.inf else hi  # below 1 df the tail's power law
    if q < 0.25:  # log P(|T| > t) = log 2q, falling in log t
        def tail(v: float) -> tuple[float, float]:
            p, _, power = _t_parts(_exp(v), df)
            return _log(p), -2.0 * power / p if p > 0.0 else math.nan
        u = _newton(tail, math.log(2.0 * q), u, lo, hi, rising=False)
    else:  # log P(|T| < t) = log(1 - 2q) (exact here), rising: keeps t's digits near the median
        def body(v: float) -> tuple[float, float]:
            _, p, power = _t_parts(_exp(v), df)
            return _log(p), 2.0 * power / p if p > 0.0 else math.nan
        u = _newton(body, math.log(2.0 * (0.5 - q)), u, lo, hi, rising=True)
    return _exp_root(u)


def t_isf(q: float, df: float) -> float:
    """The t quantile with an upper tail of q (scipy.stats.t.isf(q, df))."""
    q, df = float(q), float(df)
    _check_tail(q)
    _check_df("df", df, finite=False)  # infinite: the normal
    if q == 0.5:
        return 0.0
    if math.isinf(df):
        return norm_isf(q)
    return _t_upper(q, df) if q < 0.5 else -_t_upper(1.0 - q, df)


@lru_cache(maxsize=_CACHE)
def _norm_isf(q: float) -> float:
    return -_NORMAL.inv_cdf(q)


def norm_isf(q: float) -> float:
    """The standard normal quantile with an upper tail of q (scipy.stats.norm.isf(q))."""
    q = float(q)
    _check_tail(q)
    return _norm_isf(q)


def _f_parts(f: float, dfn: float, dfd: float) -> tuple[float, float, float]:
    """P(F > f), P(F < f) and f times the density for f > 0, from P(F > f) = I_x(dfd/2, dfn/2),
    x = dfd / (dfd + dfn f)."""
    if f <= 0.0:
        return 1.0, 0.0, 0.0
    r = dfd / dfn / f
    if r < 1e-280:
        return _ibeta_tiny(0.5 * dfd, 0.5 * dfn, math.log(dfd / dfn) - math.log(f))
    if r > 1e280:
        low, high, power = _ibeta_tiny(0.5 * dfn, 0.5 * dfd, math.log(dfn / dfd) + math.log(f))
        return high, low, power
    return _ibeta(0.5 * dfd, 0.5 * dfn, r / (1.0 + r), 1.0 / (1.0 + r))


def _f_guess(q: float, dfn: float, dfd: float) -> float:
    """The log of a start for the F quantile: Paulson's cube-root normal approximation, or where
    that fails (few denominator df, far tails) the tail's power law."""
    a, b = 2.0 / (9.0 * dfn), 2.0 / (9.0 * dfd)
    z = -_NORMAL.inv_cdf(q)
    # w = f^(1/3) with ((1 - b) w - (1 - a)) / sqrt(b w^2 + a) = z: the root on z's side
    lead = (1.0 - b) ** 2 - b * z * z
    disc = (1.0 - b) ** 2 * a + (1.0 - a) ** 2 * b - a * b * z * z
    if lead > 0.0 and disc >= 0.0:
        w = ((1.0 - a) * (1.0 - b) + z * math.sqrt(disc)) / lead
        if w > 0.0:
            return 3.0 * math.log(w)
    # P(F > f) ~ (dfd / (dfn f))^(dfd/2) / ((dfd/2) B(dfd/2, dfn/2))
    log_b = math.lgamma(0.5 * dfd) + math.lgamma(0.5 * dfn) - math.lgamma(0.5 * (dfn + dfd))
    return math.log(dfd / dfn) - 2.0 / dfd * (math.log(q * 0.5 * dfd) + log_b)


@lru_cache(maxsize=_CACHE)
def _f_isf(q: float, dfn: float, dfd: float) -> float:
    u = min(max(_f_guess(q, dfn, dfd), -700.0), 700.0)
    if q <= 0.5:  # log P(F > f) = log q, falling in log f
        def tail(v: float) -> tuple[float, float]:
            p, _, power = _f_parts(_exp(v), dfn, dfd)
            return _log(p), -power / p if p > 0.0 else math.nan
        return _exp_root(_newton(tail, math.log(q), u, -math.inf, math.inf, rising=False))

    def body(v: float) -> tuple[float, float]:  # log P(F < f) = log(1 - q), rising
        _, p, power = _f_parts(_exp(v), dfn, dfd)
        return _log(p), power / p if p > 0.0 else math.nan
    return _exp_root(_newton(body, math.log1p(-q), u, -math.inf, math.inf, rising=True))


def f_isf(q: float, dfn: float, dfd: float) -> float:
    """The F quantile with an upper tail of q (scipy.stats.f.isf(q, dfn, dfd))."""
    q, dfn, dfd = float(q), float(dfn), float(dfd)
    _check_tail(q)
    _check_df("dfn", dfn)
    _check_df("dfd", dfd)
    return _f_isf(q, dfn, dfd)


@lru_cache(maxsize=_CACHE)
def _f_sf(x: float, dfn: float, dfd: float) -> float:
    if x <= 0.0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return _f_parts(x, dfn, dfd)[0]


def f_sf(x: float, dfn: float, dfd: float) -> float:
    """P(F > x) for F of dfn and dfd degrees of freedom (scipy.stats.f.sf(x, dfn, dfd)): 1 for
    x <= 0, NaN for a NaN x."""
    x, dfn, dfd = float(x), float(dfn), float(dfd)
    _check_df("dfn", dfn)
    _check_df("dfd", dfd)
    return math.nan if math.isnan(x) else _f_sf(x, dfn, dfd)
