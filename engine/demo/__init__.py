"""Demo inference engine for exercising evalbot end to end.

`generate(dest)` writes a git repository of a tiny torch engine with a `main`
commit and four PR commits (faster, neutral, slow_long, broken), plus the model
file.  Importing this package needs numpy only; torch is used by the generated
engine and by `engine.demo.reference` at run time.
"""

from engine.demo.repo import DemoRepo, generate, variant_names

__all__ = ["DemoRepo", "generate", "variant_names"]
