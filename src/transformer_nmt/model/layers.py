"""The position-wise feed-forward network (eq. 2, section 3.3) and the encoder and decoder
layers (section 3.1).

Every sub-layer is wrapped as the paper's LayerNorm(x + Dropout(Sublayer(x))) (post-norm),
or, with pre_norm, as x + Dropout(Sublayer(LayerNorm(x))).
"""

from __future__ import annotations

from functools import partial
from typing import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from transformer_nmt.config import Activation, ModelConfig
from transformer_nmt.model.attention import AttentionCache, MultiHeadAttention
from transformer_nmt.model.dropout import bool_mask_dropout
from transformer_nmt.model.layer_norm import OutputSavingLayerNorm


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    # relu in place: its input is linear1's output, a temporary that nothing else reads.
    "relu": partial(F.relu, inplace=True),
    "swish": F.silu,
    "gelu": F.gelu,
}
"""The FFN's nonlinearity of each ModelConfig.activation."""


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately (eq. 2);
    another activation in place of max(0, .) where the model has one."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float = 0.0,
                 activation: Activation = "relu") -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation_dropout = activation_dropout
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.linear1(x))  # (batch, len, d_ff)
        hidden = bool_mask_dropout(hidden, self.activation_dropout, self.training)
        return self.linear2(hidden)


class SublayerConnection(nn.Module):
    """The residual connection and layer normalization around one sub-layer."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = OutputSavingLayerNorm(d_model)
        self.dropout = dropout
        self.pre_norm = pre_norm

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], tuple[Tensor, Tensor | None]]
                ) -> tuple[Tensor, Tensor | None]:
        """Apply `sublayer` (a function of the normalized or raw x (batch, len, d_model)
        returning (out, extra): out of x's shape, extra such as attention weights)."""
        out, extra = sublayer(self.norm(x) if self.pre_norm else x)
        out = x + bool_mask_dropout(out, self.dropout, self.training)
        return (out if self.pre_norm else self.norm(out)), extra


class EncoderLayer(nn.Module):
    """Self-attention then the FFN, each with its residual connection and norm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.d_k, cfg.d_v,
                                            cfg.attention_dropout, self_attention=True)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.attn_block = SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.ffn_block = SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm)

    def forward(self, x: Tensor, mask: Tensor | None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (batch, src_len, d_model); mask: (batch, 1, 1, src_len), True at real tokens."""
        x, weights = self.attn_block(
            x, lambda h: self.self_attn(h, mask=mask, need_weights=need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.d_k, cfg.d_v,
                                            cfg.attention_dropout, self_attention=True)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.d_k, cfg.d_v,
                                             cfg.attention_dropout, self_attention=False)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation_dropout, cfg.activation)
        self.self_attn_block = SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.cross_attn_block = SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm)
        self.ffn_block = SublayerConnection(cfg.d_model, cfg.dropout, cfg.pre_norm)

    def forward(self, x: Tensor, memory: Tensor | None, memory_mask: Tensor | None,
                self_cache: AttentionCache | None = None,
                cross_cache: AttentionCache | None = None, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: (batch, tgt_len, d_model); memory: (batch, src_len, d_model) from the encoder
        (None when cross_cache holds its keys and values); memory_mask: (batch, 1, 1,
        src_len), True at real source tokens.

        Returns the output and, if need_weights, the self- and encoder-decoder attention
        weights, (batch, heads, tgt_len, tgt_len) and (batch, heads, tgt_len, src_len).
        """
        x, self_weights = self.self_attn_block(x, lambda h: self.self_attn(
            h, causal=True, cache=self_cache, need_weights=need_weights))
        x, cross_weights = self.cross_attn_block(x, lambda h: self.cross_attn(
            h, memory, mask=memory_mask, cache=cross_cache, need_weights=need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, self_weights, cross_weights
