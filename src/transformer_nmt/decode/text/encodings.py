"""Lines' subword ids, the newest kept: the server encodes each sentence for the
splitter's length rule (documents/sentences.py, `model_fitting`) just before its job
begins, which then finds the ids here rather than encoding it again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

ENCODINGS_KEPT = 4096
"""Texts whose subword ids are kept, the newest."""


class EncodingCache:
    """Encodes texts with `vocab` (data/vocab.py's or data/bpe_vocab.py's), keeping the
    ids of the ENCODINGS_KEPT newest; safe to share between threads (the event loop and
    the decoding slots encode)."""

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        self._kept: OrderedDict[str, list[int]] = OrderedDict()
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text's subword ids, without EOS, each a list of its own: those of texts
        encoded lately as they were kept, the others encoded together now and kept."""
        with self._lock:
            kept = {text: self._kept[text] for text in texts if text in self._kept}
        missing = list(dict.fromkeys(text for text in texts if text not in kept))
        if missing:
            fresh = dict(zip(missing, self.vocab.encode_batch(missing)))
            with self._lock:
                self._kept.update(fresh)
                while len(self._kept) > ENCODINGS_KEPT:
                    self._kept.popitem(last=False)
            kept.update(fresh)
        return [list(kept[text]) for text in texts]
