"""Demo inference engine for exercising evalbot end to end.

`generate(dest)` writes a git repository of a tiny numpy engine with a `main`
commit and four PR commits (faster, neutral, slow_long, broken), plus the model
file.  The generated engine and `engine.demo.reference` need numpy only.
"""

from .repo import DemoRepo, generate, variant_names

__all__ = ["DemoRepo", "generate", "variant_names"]
