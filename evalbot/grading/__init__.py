"""Grading: pure functions from (results, policy) to a verdict, and the policies and overrides they read."""
