"""Checking a published verdict: signatures, the keys and verify commands, the reproduce commands."""
