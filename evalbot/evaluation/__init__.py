"""One evaluation: profile and job description, the harness run on one box, grading and the written files."""
