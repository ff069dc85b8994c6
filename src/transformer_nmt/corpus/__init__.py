"""Whole corpora translated in shards (back-translation, a cluster's job array): a plan
of line ranges kept in a manifest, each shard translated into its own file and put in
place whole, a rerun doing only what is not done, and the shards joined into one output
per input, line for line.

The output directory DIR holds `manifest.json` (the plan, each shard's state and the
SHA-256 of its file, the models' SHA-256 and the settings that change a translation),
under `.shards/` each shard's translations and then its record (SHA-256, sentences,
tokens), and when every shard is done one file per input, named after it. The manifest
is written by one process at a time (an OS lock on DIR), each time whole, so that
several processes (`part`, a Slurm array) can share DIR and a killed one leaves a
manifest the next run reads; a shard counts as done by its file and record, whoever
translated it, so that the manifest need not be written after every shard. The local
backend hands the shards out in order to worker processes, each with its own Translator
on its share of the cores; a worker that dies takes its shard with it, and the shard is
translated once more. The ray backend makes the shards to do a Ray Data dataset, one row
per shard, translated by a pool of actors each holding one Translator, on this machine
or on a cluster; an actor that dies is restarted by Ray and its shard translated again.
"""

from transformer_nmt.corpus.manifest import file_sha256_of, output_name
from transformer_nmt.corpus.options import CorpusOptions
from transformer_nmt.corpus.shards import merge
from transformer_nmt.corpus.translate import CorpusReport, translate_corpus

__all__ = ["CorpusOptions", "CorpusReport", "file_sha256_of", "merge", "output_name",
           "translate_corpus"]
