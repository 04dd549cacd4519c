"""Data files shipped inside the evalbot package: the label set and policies, the comment and
dashboard templates, the published verdict keys.

They are found through importlib.resources, so an installed wheel, an editable install and a
checkout read the same files; nothing is read relative to a checkout. setuptools installs the
package as a plain directory, so each resource is a real path that jinja2, PyYAML and globbing
can use directly.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def packaged(name: str) -> Path:
    """The path of a file or directory shipped in the evalbot package."""
    resource = files("evalbot").joinpath(name)
    if not isinstance(resource, Path):  # a zipped install: not produced by pip, not supported
        raise RuntimeError(f"evalbot is installed as an archive; cannot reach its {name}")
    return resource


LABELS_FILE = packaged("labels.yaml")
TEMPLATES_DIR = packaged("templates")
KEYS_DIR = packaged("keys")
