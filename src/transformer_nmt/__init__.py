"""transformer-nmt: the Transformer of "Attention Is All You Need" as translation software."""

__version__ = "0.1.0"
