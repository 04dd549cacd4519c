"""evalbot: grades performance pull requests of GPU LLM inference engines."""

__version__ = "0.1.0"
