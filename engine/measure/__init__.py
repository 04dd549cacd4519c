"""Speed: alternating pairs, the on-box stopping rule, witnesses, spoof checks, GPU state, rate parsing."""
