"""The package's version: one leaf module, so that whoever records it (the CLI, a run's
config, an export, the server) imports no more than this, and pyproject.toml reads it."""

__version__ = "0.1.0"
