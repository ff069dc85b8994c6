"""A probe on one decoder layer's encoder-decoder attention: as that layer's cache (or a
wrapper of it), it records the attention weights each time the layer attends, computed in
float32 beside the fused kernel, the layer's output unchanged. The confidence's features
read them while the search decodes (decode/search/feature_track.py)."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from transformer_nmt.model.attention import Kernel, attend, attention_weights

ATTENTION_LAYER = -2
"""The decoder layer whose encoder-decoder attention is read, for word alignments
(transformer_nmt.decode.search.teacher_forced.attach_details) and for the confidence's coverage: the
penultimate, whose attention aligns with the source words best (Garg et al. 2019). A
decoder of one layer reads that one (`probe_layer`)."""


def probe_layer(layers: int) -> int:
    """The index of ATTENTION_LAYER in a decoder of `layers` layers."""
    return max(layers + ATTENTION_LAYER, 0)


class Probe:
    """One layer's encoder-decoder attention cache `inner` (None: the layer keeps
    nothing), recording the weights (float32 (batch, heads, tgt_len, src_len)) of
    the latest attention in `weights`. Everything else is the inner cache's."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.weights: Tensor | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner"], name)

    @property
    def holds_memory(self) -> bool:
        """Whether the inner cache keeps memory's keys and values."""
        return self.inner is not None and self.inner.holds_memory

    def attend(self, q: Tensor, k: Tensor | None, v: Tensor | None, mask: Tensor | None,
               causal: bool, need_weights: bool, kernel: Kernel, dropout: float = 0.0
               ) -> tuple[Tensor, Tensor | None]:
        """The inner cache's attention (or `attend`'s), its kernel asked for the weights
        beside; returns them only if need_weights."""

        def probing(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool,
                    asked: bool, dropout: float) -> tuple[Tensor, Tensor | None]:
            out, weights = kernel(q, k, v, mask, causal, asked, dropout)
            if weights is None:  # float32 (runtime.compiles_per_shape: bf16 on a CPU)
                weights = attention_weights(q.float(), k.float(), mask)
            return out, weights

        if self.inner is None:
            out, weights = attend(q, k, v, mask, causal, need_weights, probing, dropout)
        else:
            out, weights = self.inner.attend(q, k, v, mask, causal, need_weights, probing,
                                             dropout)
        self.weights = weights.float()
        return out, weights if need_weights else None


def install_probe(cache: Any, layer: int) -> Probe:
    """A Probe on decoder layer `layer` of `cache` (a DecoderCache or RowCache, whose
    cross_attention it wraps in place)."""
    probe = Probe(cache.cross_attention[layer])
    cache.cross_attention[layer] = probe
    return probe


class Unkept:
    """The decoder cache of a search that decodes the whole prefix at every step: it keeps
    nothing, so that a probe can sit on one layer (`install_probe`)."""

    def __init__(self, layers: int) -> None:
        self.self_attention: list[Any] = [None] * layers
        self.cross_attention: list[Any] = [None] * layers

    def new_positions(self, new: int) -> int:
        """The prefix is fed whole: it starts at position 0."""
        return 0

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Nothing kept, nothing to reorder."""
