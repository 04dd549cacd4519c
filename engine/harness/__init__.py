"""The harness's steps: build both sides, measure, score, write the results; housekeeping on the box."""
