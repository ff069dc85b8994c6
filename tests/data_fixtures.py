"""Helpers of the data tests: a split written straight to .bin/.idx files with a manifest,
without `nmt prepare`."""

import numpy as np

from transformer_nmt.data.binarize import IdsWriter
from transformer_nmt.data.manifest import FORMAT_VERSION, MANIFEST, bin_path, idx_path
from transformer_nmt.files import write_json_atomic

SRC = [[5, 6, 7], [], [8], [9, 10, 11, 12]]
TGT = [[20], [21, 22], [], [23, 24]]


def make_split(data_dir, split="train", src=SRC, tgt=TGT, dtype=np.dtype("<u2"), chunk=3,
               vocab_size=64):
    for lang, sequences in (("en", src), ("de", tgt)):
        with IdsWriter(bin_path(data_dir, split, lang), idx_path(data_dir, split, lang),
                       dtype) as writer:
            for start in range(0, len(sequences), chunk):
                writer.add(sequences[start:start + chunk])
    write_json_atomic(data_dir / MANIFEST, {"format_version": FORMAT_VERSION, "src_lang": "en",
                                            "tgt_lang": "de", "dtype": dtype.str,
                                            "vocab": {"size": vocab_size},
                                            "splits": {split: {"pairs": len(src)}}})
