"""What `nmt translate-corpus` is asked to do (corpus/options.py): a shard of at least one
line, a backend it has, and a Ray address only for Ray."""

import pytest

from transformer_nmt.config import DEFAULT_SHARD_LINES
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.errors import UserError


def test_the_defaults_are_local_workers_and_the_default_shard():
    options = CorpusOptions(("m.pt",), ("in.en",), "out")
    assert (options.backend, options.shard_lines, options.output_format) == (
        "local", DEFAULT_SHARD_LINES, "text")
    assert CorpusOptions(("m.pt",), ("in.en",), "out", backend="ray",
                         ray_address="auto").ray_address == "auto"


@pytest.mark.parametrize("changes, message", [
    ({"shard_lines": 0}, "--shard-lines must be at least 1, not 0"),
    ({"shard_lines": 2.0}, "--shard-lines must be at least 1, not 2.0"),
    ({"backend": "slurm"}, "--backend is one of local, ray, not 'slurm'"),
    ({"ray_address": "auto"}, "--ray-address is for --backend ray"),
])
def test_what_cannot_be_run_is_refused_naming_the_flag(changes, message):
    with pytest.raises(UserError, match="^" + message):
        CorpusOptions(("m.pt",), ("in.en",), "out", **changes)
