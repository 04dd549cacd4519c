"""The JSON contracts between bot, box and engine (job, results, score dumps), checked at both ends."""
