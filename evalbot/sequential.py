"""Per-look critical values for the on-box stopping rule (bot side: scipy lives here, not on the box).

The family is every cell that can change the verdict (guards included) and every look, so a
Bonferroni split of alpha over cells x looks bounds the per-PR false-verdict rate by alpha.
Each look uses Student's t with n_k - 1 degrees of freedom.
"""

from __future__ import annotations

from collections.abc import Sequence

from scipy import stats as sps


def critical_values(looks: Sequence[int], family: int, alpha: float) -> list[float]:
    """Two-sided critical value per look for a family of `family` cells."""
    if family < 1 or not looks:
        raise ValueError("need at least one cell and one look")
    per_test = alpha / (family * len(looks))
    return [round(float(sps.t.ppf(1 - per_test / 2, df=n - 1)), 6) for n in looks]
