"""evalbot.grading.quantiles against scipy: the standard-library t, normal and F functions give
scipy's values over the ranges evalbot uses (the callers: grading/sequential.py,
grading/confirmation.py, grading/correctness_policy.py, service/health.py) and well beyond."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import special, stats

from evalbot.grading import quantiles

RTOL = 1e-10

# t: the callers' df run from 1 (correctness_policy's floor) through pairs - 1 and
# pool_df + pairs - 1 (tens to a few hundred); non-integer df and large df beyond that
T_DFS = [1, 1.5, 2, 2.5, 3, 3.7, 4, 5, 6, 7.5, 9, 10, 15, 19, 24, 29, 30, 45, 46, 50, 64, 99, 100,
         150, 250, 333.3, 500, 999, 1000, 1500, 2000]
# tails: Bonferroni-split alphas (alpha / (2 family looks) down to ~1e-6), SPOOF_ALPHA / looks,
# the 5% and 10% levels, the settle level, and the far tails and the median side
TAILS = [1e-8, 3e-8, 1e-7, 1e-6, 3.1e-6, 1e-5, 3.125e-5, 1e-4, 6.25e-4, 1e-3, 2.5e-3, 5e-3, 0.01,
         0.025, 0.05, 0.1, 0.2, 0.25, 0.2500001, 0.3, 0.4, 0.45, 0.49]
F_DFS = [1, 1.5, 2, 2.5, 3, 4, 5, 8, 9, 15, 24, 29, 46, 50, 100, 250, 500]
F_XS = [0.0, 1e-6, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 2.25, 3.0, 4.0,
        5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0]


def assert_close(got: float, want: float, what: str, rtol: float = RTOL) -> None:
    assert type(got) is float, what
    assert abs(got - want) <= rtol * abs(want), f"{what}: {got!r} != scipy {want!r}"


@pytest.mark.parametrize("df", T_DFS)
def test_t_isf_matches_scipy(df: float) -> None:
    want = stats.t.isf(TAILS, df)
    for q, w in zip(TAILS, want, strict=True):
        assert_close(quantiles.t_isf(q, df), float(w), f"t_isf({q}, {df})")
    lower = [1.0 - q for q in TAILS]  # the lower tails: the same quantiles, negative
    for q, w in zip(lower, stats.t.isf(lower, df), strict=True):
        assert_close(quantiles.t_isf(q, df), float(w), f"t_isf({q}, {df})")


@pytest.mark.parametrize("df", [1, 2, 2.5, 3, 4, 5, 10, 29, 100, 2000])
def test_t_isf_near_the_median(df: float) -> None:
    """Within 0.01 of the median scipy's own t quantile loses relative digits (4e-4 at 4 df and
    q = 0.4999999): there the reference is its incomplete beta, P(|T| < t) = I_y(1/2, df/2),
    y = t^2 / (df + t^2), which must give back 1 - 2q."""
    assert quantiles.t_isf(0.5, df) == 0.0
    for q in [0.49, 0.495, 0.499, 0.4999, 0.4999999, 0.5 - 1e-12]:
        t = quantiles.t_isf(q, df)
        assert t > 0.0 and quantiles.t_isf(1.0 - q, df) == -quantiles.t_isf(1.0 - (1.0 - q), df)
        y = t * t / (df + t * t)
        assert_close(float(special.betainc(0.5, df / 2, y)), 1.0 - 2.0 * q, f"t_isf({q}, {df})")


@pytest.mark.parametrize("df", [3000, 5000, 9999, 1e4, 10001, 2e4, 5e4, 1e5, 1e6, 1e9])
def test_t_isf_large_df(df: float) -> None:
    for q in TAILS + [1e-12, 1e-20]:
        assert_close(quantiles.t_isf(q, df), float(stats.t.isf(q, df)), f"t_isf({q}, {df})")
    assert quantiles.t_isf(0.01, math.inf) == quantiles.norm_isf(0.01)


@pytest.mark.parametrize("df", [0.1, 0.5, 0.9])
def test_t_isf_below_one_df(df: float) -> None:
    for q in [1e-6, 1e-3, 0.05, 0.3]:
        assert_close(quantiles.t_isf(q, df), float(stats.t.isf(q, df)), f"t_isf({q}, {df})")


def test_norm_isf_matches_scipy() -> None:
    tails = TAILS + [1e-300, 1e-20, 0.4999999, 0.6, 0.9, 0.975, 1 - 1e-8]
    for q, w in zip(tails, stats.norm.isf(tails), strict=True):
        assert_close(quantiles.norm_isf(q), float(w), f"norm_isf({q})")
    assert quantiles.norm_isf(0.5) == 0.0


@pytest.mark.parametrize("dfn", F_DFS)
def test_f_isf_matches_scipy(dfn: float) -> None:
    """scipy.stats.f.isf(q) is fdtri(1 - q): the exact quantile of the tail 1 - (1 - q), which
    below q ~ 1e-6 is not q (f_isf solves for q itself); the comparison asks f_isf for that
    tail."""
    tails = TAILS + [0.5, 0.6, 0.9, 0.99]
    for dfd in F_DFS:
        for q, w in zip(tails, stats.f.isf(tails, dfn, dfd), strict=True):
            got = quantiles.f_isf(1.0 - (1.0 - q), dfn, dfd)
            assert_close(got, float(w), f"f_isf({q}, {dfn}, {dfd})")


def test_f_isf_small_tails_are_exact() -> None:
    """Where scipy's 1 - q loses digits, f_isf still inverts scipy's own (accurate) f.sf."""
    for dfn, dfd, q in itertools.product([1, 3, 24], [1, 5, 46, 500], [1e-8, 1e-7, 3e-8]):
        f = quantiles.f_isf(q, dfn, dfd)
        # sf's relative error is f's times |d log sf / d log f| < (dfn + dfd) / 2 here
        assert_close(float(stats.f.sf(f, dfn, dfd)), q, f"f_isf({q}, {dfn}, {dfd})", rtol=1e-9)
        assert_close(quantiles.f_sf(f, dfn, dfd), q, f"f_sf(f_isf({q}, {dfn}, {dfd}))")


@pytest.mark.parametrize("dfn", F_DFS)
def test_f_sf_matches_scipy(dfn: float) -> None:
    for dfd in F_DFS:
        for x, w in zip(F_XS, stats.f.sf(F_XS, dfn, dfd), strict=True):
            assert_close(quantiles.f_sf(x, dfn, dfd), float(w), f"f_sf({x}, {dfn}, {dfd})")


def test_f_sf_outside_the_support() -> None:
    assert quantiles.f_sf(-1.0, 3, 4) == 1.0 == float(stats.f.sf(-1.0, 3, 4))
    assert quantiles.f_sf(0, 3, 4) == 1.0
    assert quantiles.f_sf(math.inf, 3, 4) == 0.0
    assert math.isnan(quantiles.f_sf(math.nan, 3, 4))


def test_the_callers_rounded_critical_values_are_scipys() -> None:
    """The values the callers round to 6 digits (sequential.DIGITS, correctness_policy.DIGITS)
    and store in jobs are the ones scipy gave: a replay of an old job compares equal."""
    tails = sorted({alpha / (2 * family * looks) for alpha in (0.01, 0.05, 0.1)
                    for family in range(1, 41) for looks in range(1, 17)}
                   | {0.005 / looks for looks in range(1, 17)}  # confirmation
                   | {0.001 / looks for looks in range(1, 17)}  # contradiction (SPOOF_ALPHA)
                   | {0.05, 0.005, 0.01})  # TIER_CAP_ALPHA, drift levels, equivalence
    dfs = list(range(1, 80)) + [99, 120, 199, 250, 400]
    want = np.round(stats.t.isf(np.array(tails)[:, None], np.array(dfs)[None, :]), 6)
    for (i, q), (j, df) in itertools.product(enumerate(tails), enumerate(dfs)):
        assert round(quantiles.t_isf(q, df), 6) == want[i, j], (q, df)
    for pairs, pool_df in itertools.product(range(2, 41), [2, 3, 5, 9, 15, 24, 29, 46, 100]):
        want_f = round(float(stats.f.isf(0.01, pairs - 1, pool_df)), 6)  # sequential.GUARD_ALPHA
        assert round(quantiles.f_isf(0.01, pairs - 1, pool_df), 6) == want_f, (pairs, pool_df)


def test_numpy_and_int_arguments_give_floats() -> None:
    assert type(quantiles.t_isf(np.float64(0.05), np.int64(9))) is float
    assert quantiles.t_isf(np.float64(0.05), np.int64(9)) == quantiles.t_isf(0.05, 9.0)
    assert type(quantiles.norm_isf(np.float32(0.25))) is float
    assert type(quantiles.f_isf(0.01, np.int64(4), 29)) is float
    assert type(quantiles.f_sf(np.float64(2.0), 4, np.int64(29))) is float


@pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf, -math.inf])
def test_tail_outside_zero_one_is_an_error(q: float) -> None:
    with pytest.raises(ValueError, match="tail probability"):
        quantiles.t_isf(q, 5)
    with pytest.raises(ValueError, match="tail probability"):
        quantiles.norm_isf(q)
    with pytest.raises(ValueError, match="tail probability"):
        quantiles.f_isf(q, 3, 5)


@pytest.mark.parametrize("df", [0, -1, -0.5, math.nan, -math.inf])
def test_degrees_of_freedom_not_positive_is_an_error(df: float) -> None:
    with pytest.raises(ValueError, match="df .* degrees of freedom"):
        quantiles.t_isf(0.05, df)
    with pytest.raises(ValueError, match="dfn .* degrees of freedom"):
        quantiles.f_isf(0.05, df, 5)
    with pytest.raises(ValueError, match="dfd .* degrees of freedom"):
        quantiles.f_isf(0.05, 5, df)
    with pytest.raises(ValueError, match="dfn .* degrees of freedom"):
        quantiles.f_sf(1.0, df, 5)
    with pytest.raises(ValueError, match="dfd .* degrees of freedom"):
        quantiles.f_sf(1.0, 5, df)


def test_infinite_f_degrees_of_freedom_are_an_error() -> None:
    with pytest.raises(ValueError, match="finite"):
        quantiles.f_isf(0.05, math.inf, 5)
    with pytest.raises(ValueError, match="finite"):
        quantiles.f_sf(1.0, 5, math.inf)


def test_repeated_arguments_are_cached() -> None:
    quantiles.t_isf(0.0123, 17)
    hits = quantiles._t_upper.cache_info().hits
    assert quantiles.t_isf(0.0123, 17) == quantiles.t_isf(0.0123, 17.0)
    assert quantiles._t_upper.cache_info().hits == hits + 2


def test_import_does_not_load_scipy() -> None:
    code = ("import sys, evalbot.grading.quantiles as q; q.t_isf(0.05, 9); q.f_sf(2.0, 3, 9); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
