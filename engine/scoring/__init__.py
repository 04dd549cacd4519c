"""Correctness: scoring base and head against the reference, its arithmetic, the long-context text."""
