"""The package's release (one source: pyproject.toml reads it, ``reliable_kafka.__version__`` re-exports it)."""

__version__ = "0.1.0"
