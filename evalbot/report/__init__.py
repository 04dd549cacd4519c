"""What is published: the PR comment, its details and correctness part, the markdown rendering,
the dashboard and the history it plots."""
