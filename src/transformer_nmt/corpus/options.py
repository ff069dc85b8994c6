"""What `nmt translate-corpus` is asked to do: the models, the inputs, the output
directory, the search and the backend that runs it."""

from __future__ import annotations

from dataclasses import dataclass

from transformer_nmt.config import DEFAULT_SHARD_LINES
from transformer_nmt.decode.text.translator import TranslatorOptions
from transformer_nmt.errors import UserError

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class CorpusOptions:
    """What `translate_corpus` translates, where to, and how."""

    models: tuple[str, ...]
    """The model file, or several for an ensemble."""
    inputs: tuple[str, ...]
    """Text files (gzipped or not), or directories whose files are all inputs."""
    out: str
    """The output directory: manifest, shards and one output per input."""
    translator: TranslatorOptions = TranslatorOptions()
    """The search and its resources; `workers` is the number of worker processes (Ray
    actors with the ray backend)."""
    output_format: str = "text"
    """text (nmt translate's lines) or json (one JSON object per input line)."""
    errors: str = "strict"
    """Invalid UTF-8 in the input: strict (an error naming file and line) or replace."""
    shard_lines: int = DEFAULT_SHARD_LINES
    """Input lines per shard."""
    backend: str = "local"
    """local (worker processes on this machine) or ray (Ray actors, here or on a cluster)."""
    ray_address: str | None = None
    """The Ray cluster to join (the ray backend); None starts Ray on this machine."""

    def __post_init__(self) -> None:
        if type(self.shard_lines) is not int or self.shard_lines < 1:
            raise UserError(f"--shard-lines must be at least 1, not {self.shard_lines!r}")
        if self.backend not in BACKENDS:
            raise UserError(f"--backend is one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.ray_address is not None and self.backend != "ray":
            raise UserError("--ray-address is for --backend ray")
