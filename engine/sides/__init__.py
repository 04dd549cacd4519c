"""The two sides of a job (base, head): each checked out by full SHA and built, its artifacts hashed,
cached and re-verified before every use."""
