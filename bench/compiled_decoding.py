"""Directions for faster decoding, measured against the eager path in one run (issue 20).

Prints JSON lines, on a random base-shape model with the realistic forced output lengths
of bench/translate_speed.py:

- `gemm`: the linear products of one incremental decoding step (the decoder's 37 weight
  matrices, cycling so that they come from memory as in a real step) at 1-64 rows: fp32
  as PyTorch calls MKL (`addmm`), fp32 with the weights prepacked for MKL at exactly that
  row count (what Inductor's `freezing` does), and our int8 (dynamic quantization).
- `attention`: one single-query attention call over a cache, the fused kernel
  (scaled_dot_product_attention) against the same arithmetic written as products and
  sums for torch.compile to fuse, caches cycling.
- `search`: greedy and beam 4 over newstest2014 sentences, eager against the decoder step
  compiled by torch.compile (Inductor), either with dynamic shapes, or with a fixed row
  count per batch (finished sentences' rows refilled with copies of live ones) so that
  freezing can prepack the weights for MKL; compile time, speed ratio, identical outputs.

Nothing here is used by `nmt`: bench/RESULTS.md ("decoding directions") says why.

    python bench/compiled_decoding.py [--sentences 128] [--workers 2]
"""

from __future__ import annotations

import argparse
import copy
import math
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import translate_speed
from translate_speed import figure
from transformer_nmt.config import DecodeConfig, get_preset
from transformer_nmt.data.vocab import Vocab
from transformer_nmt.decode.attention.kv_cache import StoredKVCache, decoder_cache
from transformer_nmt.decode.runtime.precision import prepare_model
from transformer_nmt.decode.search.base import SpecialIds
from transformer_nmt.decode.search.searches import beam_search, greedy_search
from transformer_nmt.model.attention import MultiHeadAttention, _fold_group, _unfold_group
from transformer_nmt.model.cache import DecoderCache
from transformer_nmt.model.transformer import DecoderOut, EncoderOut, Transformer


def extend(cache: StoredKVCache, new: int) -> tuple[Tensor, Tensor]:
    """Views (batch, heads, length + new, d) of a cache's keys and values after `new` more
    positions, whose last `new` the compiled step writes in place."""
    end = cache.length + new
    if end > cache._keys.size(2):
        cache._grow(cache._keys, cache._values, end)
    cache.length = end
    return cache.keys, cache.values


def compact(cache: StoredKVCache) -> None:
    """Shrink a cache's buffers to its positions, so that its views are contiguous."""
    if cache._keys is not None and cache._keys.size(2) != cache.length:
        cache._keys, cache._values = cache.keys.contiguous(), cache.values.contiguous()


def _self_attention(attn: MultiHeadAttention, x: Tensor, keys: Tensor, values: Tensor,
                    position: Tensor) -> Tensor:
    """One query per row attending to its cached past and itself.

    x: (batch, 1, d_model); keys/values: (batch, heads, position + 1, d) views of the
    cache, whose last position this writes (in place) before attending over all of them.
    """
    q, k, v = attn.qkv_proj(x).split(
        [attn.heads * attn.d_k, attn.heads * attn.d_k, attn.heads * attn.d_v], dim=-1)
    # The cache may hold a narrower dtype than the step computes in (int8 decoding's bf16).
    q = attn._split_heads(q, attn.d_k).to(keys.dtype)  # (batch, heads, 1, d_k)
    keys.index_copy_(2, position, attn._split_heads(k, attn.d_k).to(keys.dtype))
    values.index_copy_(2, position, attn._split_heads(v, attn.d_v).to(values.dtype))
    out = F.scaled_dot_product_attention(q, keys, values).to(x.dtype)
    return attn.out_proj(out.transpose(1, 2).flatten(2))  # (batch, 1, d_model)


def _cross_attention(attn: MultiHeadAttention, x: Tensor, keys: Tensor, values: Tensor,
                     memory_mask: Tensor) -> Tensor:
    """x: (batch, 1, d_model) attending to one sentence's encoder keys/values
    (sentences, heads, src_len, d); batch = group * sentences, as in MultiHeadAttention."""
    q = attn._split_heads(attn.q_proj(x), attn.d_k).to(keys.dtype)  # (batch, heads, 1, d_k)
    group = q.size(0) // keys.size(0)
    q = _fold_group(q, group)  # (sentences, heads, group, d_k)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=memory_mask).to(x.dtype)
    out = _unfold_group(out, group)  # (batch, heads, 1, d_v)
    return attn.out_proj(out.transpose(1, 2).flatten(2))


def decoder_step(model: Transformer, tokens: Tensor, position: Tensor, positional: Tensor,
                 self_keys: list[Tensor], self_values: list[Tensor],
                 cross_keys: list[Tensor], cross_values: list[Tensor],
                 memory_mask: Tensor) -> Tensor:
    """Logits (batch, 1, vocab) of the token after `tokens` (batch, 1) at `position` (1,).

    positional: (1, d_model) the position's encoding; self_keys/values: per layer
    (batch, heads, position + 1, d), written at `position`; cross_keys/values: per layer
    (sentences, heads, src_len, d); memory_mask: (sentences, 1, 1, src_len) True at real
    source tokens. The same arithmetic as Transformer.decode with a cache, one position.
    """
    x = model.tgt_embed(tokens) * model.embed_scale + positional  # (batch, 1, d_model)
    for i, layer in enumerate(model.decoder_layers):
        x, _ = layer.self_attn_block(x, lambda h: (_self_attention(
            layer.self_attn, h, self_keys[i], self_values[i], position), None))
        x, _ = layer.cross_attn_block(x, lambda h: (_cross_attention(
            layer.cross_attn, h, cross_keys[i], cross_values[i], memory_mask), None))
        x, _ = layer.ffn_block(x, lambda h: (layer.ffn(h), None))
    if model.decoder_norm is not None:
        x = model.decoder_norm(x)
    return model.project(x)


def _pad_rows(x: Tensor, rows: int, group: int) -> Tensor:
    """x (real, ...) with its last `group` rows repeated up to `rows` rows: the padding
    rows copy a real sentence's (so they compute nothing invalid) and are discarded."""
    missing = rows - x.size(0)
    if missing <= 0:
        return x
    tail = x[-group:].repeat(missing // group, *([1] * (x.dim() - 1)))
    return torch.cat([x, tail])


class PaddedCache:
    """A DecoderCache that keeps as many rows as it had at its largest (the first step of
    a batch after the search widened it to its beams) as sentences finish: the rows of
    finished sentences are refilled with copies of a live one, so that the compiled step
    always meets one row count, the one its weights are packed for.

    The search sees the real rows only: they come first, in its order. Without
    fixed_rows it is the plain cache (rows shrink with the batch).
    """

    def __init__(self, inner: DecoderCache, fixed_rows: bool = True) -> None:
        self.inner, self.fixed_rows = inner, fixed_rows
        self.rows = 0
        """Rows the inner cache holds (real and padding), once the first step is done."""
        self.real_rows = 0
        """Rows the search knows (the first real_rows of the inner cache)."""
        self.group = 1
        """Rows per sentence (the beam after beam search's first step)."""

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.inner.length

    def started(self, rows: int) -> None:
        """The first step decoded `rows` rows, one per sentence, and filled the
        encoder-decoder keys and values, which are made contiguous."""
        self.rows = self.real_rows = rows
        for layer in self.inner.cross_attention:
            compact(layer)

    def reorder(self, index: Tensor, sentences: Tensor | None = None) -> None:
        """Keep decoder rows `index` (new_rows,) and encoder rows `sentences`, as
        DecoderCache.reorder, padded to the largest row count so far."""
        real_sentences = self.real_rows // self.group if sentences is None else sentences.numel()
        self.group = index.numel() // max(real_sentences, 1)
        self.real_rows = index.numel()
        self.rows = max(self.rows, index.numel()) if self.fixed_rows else index.numel()
        padded_sentences = None
        if sentences is not None:
            padded_sentences = _pad_rows(sentences, self.rows // self.group, 1)
        self.inner.reorder(_pad_rows(index, self.rows, self.group), padded_sentences)

    def unpad(self) -> None:
        """Drop the padding rows, leaving the cache the eager model's to continue."""
        if self.rows > self.real_rows:
            sentences = torch.arange(self.real_rows // self.group,
                                     device=self.inner.cross_attention[0].keys.device)
            self.inner.reorder(torch.arange(self.real_rows, device=sentences.device), sentences)
        self.rows = self.real_rows


class CompiledDecoder(nn.Module):
    """A Transformer whose incremental decoding steps after the first run compiled, the
    rest (and every step after a compiler failure) on the eager model; speaks the
    searches' Seq2Seq protocol.

    fixed_rows: every batch's steps see one row count (PaddedCache), static in the
    compiled program, so that freezing prepacks the weights for it (one program per row
    count); otherwise every size is dynamic (one program, the weights unpacked).
    """

    def __init__(self, model: Transformer, fixed_rows: bool) -> None:
        super().__init__()
        self.model, self.cfg, self.pad_id = model, model.cfg, model.pad_id
        self.fixed_rows = fixed_rows
        self._step = torch.compile(decoder_step, dynamic=not fixed_rows)
        self._failed = False
        self._lock = threading.Lock()

    def encode(self, src: Tensor, need_weights: bool = False) -> EncoderOut:
        return self.model.encode(src, need_weights)

    def new_cache(self, max_length: int = 0) -> PaddedCache:
        # Every batch's self-attention buffers get the same capacity, so that their views'
        # strides, on which a static program is specialized, never change; the operating
        # system backs only the positions written.
        return PaddedCache(decoder_cache(self.model, self.cfg.max_positions), self.fixed_rows)

    def decode(self, tgt: Tensor, enc: EncoderOut, cache: PaddedCache | None = None,
               need_weights: bool = False) -> DecoderOut:
        if cache is None:
            return self.model.decode(tgt, enc, None, need_weights)
        if (need_weights or tgt.size(1) != 1 or cache.length == 0 or self._failed
                or torch.is_grad_enabled()):
            cache.unpad()
            out = self.model.decode(tgt, enc, cache.inner, need_weights)
            if cache.rows == 0:
                cache.started(tgt.size(0))
            return out
        position = cache.length
        try:
            logits = self._compiled_step(tgt, enc, cache, position)
        except Exception as error:  # noqa: BLE001 - any compiler failure means eager
            self._give_up(error)
            for layer in cache.inner.self_attention:
                layer.length = position  # the failed step's writes do not count
            return self.decode(tgt, enc, cache, need_weights)
        return DecoderOut(logits[: tgt.size(0)])

    def _compiled_step(self, tgt: Tensor, enc: EncoderOut, cache: PaddedCache,
                       position: int) -> Tensor:
        rows, group = cache.rows, cache.group
        views = [extend(layer, 1) for layer in cache.inner.self_attention]
        cross = cache.inner.cross_attention
        memory_mask = _pad_rows(enc.src_mask, rows // group, 1)[:, None, None, :]
        inputs = ([k for k, _ in views], [v for _, v in views],
                  [layer.keys for layer in cross], [layer.values for layer in cross])
        tokens = _pad_rows(tgt, rows, group).contiguous()
        if self.fixed_rows:
            # Positions and source length dynamic, rows static.
            for tensor in (t for tensors in inputs for t in tensors):
                torch._dynamo.mark_dynamic(tensor, 2)
            torch._dynamo.mark_dynamic(memory_mask, 3)
        # Freezing through the config: as a torch.compile option it does not reach the
        # pass that packs the weights (measured: plain addmm calls remain).
        with torch._inductor.config.patch(freezing=True):
            return self._step(
                self.model, tokens, torch.tensor([position], device=tgt.device),
                self.model._positional(position, 1, self.model.positions).clone(), *inputs,
                memory_mask)

    def _give_up(self, error: Exception) -> None:
        with self._lock:
            if not self._failed:
                self._failed = True
                figure(figure="compile_failed", error=f"{type(error).__name__}: {error}"[:300])


_INT8_LINEARS: dict[int, nn.Module] = {}


@torch.library.custom_op("nmt_bench::int8_linear", mutates_args=())
def int8_linear(x: Tensor, key: int) -> Tensor:
    """The dynamically quantized linear layer registered under `key`, applied to x: an
    operator opaque to torch.compile (its packed weights are an object Dynamo cannot
    trace, which would otherwise split the step into ~40 graphs)."""
    return _INT8_LINEARS[key](x)


@int8_linear.register_fake
def _(x: Tensor, key: int) -> Tensor:
    return x.new_empty(*x.shape[:-1], _INT8_LINEARS[key].out_features)


class OpaqueInt8Linear(nn.Module):
    """A quantized dynamic Linear called through `int8_linear`."""

    def __init__(self, linear: nn.Module) -> None:
        super().__init__()
        self.key, self.out_features = id(linear), linear.out_features
        _INT8_LINEARS[self.key] = linear

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.nmt_bench.int8_linear(x, self.key)


def opaque_int8(model: Transformer) -> Transformer:
    """An int8 model (prepare_model's) whose decoder-step linear layers are opaque
    operators for the compiler, in place."""
    for layer in model.decoder_layers:
        for parent in (layer.self_attn, layer.cross_attn, layer.ffn):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.ao.nn.quantized.dynamic.Linear):
                    setattr(parent, name, OpaqueInt8Linear(child))
    model.projector = OpaqueInt8Linear(model.projector)
    return model


def decoder_layer_shapes(d_model: int, d_ff: int) -> list[tuple[int, int]]:
    """(out, in) of one decoder layer's step products: fused QKV, self-attention output,
    encoder-decoder query and output, the two FFN layers."""
    return [(3 * d_model, d_model), (d_model, d_model), (d_model, d_model), (d_model, d_model),
            (d_ff, d_model), (d_model, d_ff)]


def measure_gemm(vocab_size: int, repeats: int = 20) -> None:
    """One decoding step's linear products at several row counts, three ways."""
    cfg = get_preset("base").model
    torch.manual_seed(0)
    shapes = decoder_layer_shapes(cfg.d_model, cfg.d_ff) * cfg.decoder_layers + [(vocab_size, cfg.d_model)]
    linears = [nn.Linear(inputs, outputs) for outputs, inputs in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        int8 = [prepare_model(nn.Sequential(copy.deepcopy(linear)), "cpu", "int8")
                for linear in linears]

    def timed(rows: int, apply) -> float:
        inputs = {width: torch.randn(rows, width) for width in (cfg.d_model, cfg.d_ff)}
        for _ in range(2):
            for i, linear in enumerate(linears):
                apply(i, inputs[linear.in_features])
        start = time.perf_counter()
        for _ in range(repeats):
            for i, linear in enumerate(linears):
                apply(i, inputs[linear.in_features])
        return (time.perf_counter() - start) / repeats * 1000

    with torch.inference_mode():
        for rows in (1, 4, 16, 64):
            packed = [torch.ops.mkl._mkl_reorder_linear_weight(linear.weight, rows)
                      for linear in linears]
            plain = timed(rows, lambda i, x: F.linear(x, linears[i].weight, linears[i].bias))
            prepacked = timed(rows, lambda i, x: torch.ops.mkl._mkl_linear(
                x, packed[i], linears[i].weight, linears[i].bias, rows))
            quantized = timed(rows, lambda i, x: int8[i](x))
            figure(figure="gemm", rows=rows, fp32_ms=round(plain, 2),
                   fp32_prepacked_ms=round(prepacked, 2), int8_ms=round(quantized, 2),
                   prepacked_speedup=round(plain / prepacked, 3),
                   int8_speedup=round(plain / quantized, 3))


def single_query_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(d)) v for q (batch, heads, 1, d), k/v (batch, heads, len, d),
    as products and sums that Inductor fuses into one loop nest."""
    scores = (q * k).sum(-1, keepdim=True) * (1.0 / math.sqrt(q.size(-1)))  # (b, h, len, 1)
    return (torch.softmax(scores, dim=2) * v).sum(2, keepdim=True)  # (b, h, 1, d)


def measure_attention(rows: int = 16, length: int = 48, caches: int = 24) -> None:
    """The fused kernel against a compiled single-query attention, caches cycling."""
    cfg = get_preset("base").model
    fused_by_compiler = torch.compile(single_query_attention, dynamic=True)
    kv = [(torch.randn(rows, cfg.heads, length, cfg.d_k), torch.randn(rows, cfg.heads, length, cfg.d_k))
          for _ in range(caches)]
    q = torch.randn(rows, cfg.heads, 1, cfg.d_k)
    results = {}
    with torch.inference_mode():
        error = (fused_by_compiler(q, *kv[0]) - F.scaled_dot_product_attention(q, *kv[0])).abs().max()
        for name, attend in (("sdpa", F.scaled_dot_product_attention), ("compiled", fused_by_compiler)):
            for _ in range(2):
                for k, v in kv:
                    attend(q, k, v)
            start = time.perf_counter()
            for _ in range(20):
                for k, v in kv:
                    attend(q, k, v)
            results[name] = (time.perf_counter() - start) / 20 / caches * 1e6
    figure(figure="attention", rows=rows, length=length, sdpa_us=round(results["sdpa"], 1),
           compiled_us=round(results["compiled"], 1),
           speedup=round(results["sdpa"] / results["compiled"], 3), max_abs_diff=float(error))


def measure_search(args: argparse.Namespace, vocab: Vocab) -> None:
    """Greedy and beam 4, eager against both compiled designs, alternating rounds."""
    special = SpecialIds(vocab.pad_id, vocab.bos_id, vocab.eos_id)
    eager = translate_speed.random_model(vocab)
    ids = vocab.encode_batch(translate_speed.read_sentences(translate_speed.DATA / "newstest2014.en",
                                                            args.sentences))
    sources = translate_speed.batches(ids, args.batch_size, special.pad, special.eos)
    designs = {"eager": eager}
    if args.precision == "int8":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eager.model = prepare_model(eager.model, "cpu", "int8")
        # Its own copy: the compiled designs' linear layers become opaque operators.
        compiled_model = opaque_int8(copy.deepcopy(eager.model))
        variants = (("compiled_dynamic", False),)
    else:
        compiled_model = eager.model
        variants = (("compiled_dynamic", False), ("compiled_fixed_rows", True))
    for name, fixed_rows in variants:
        designs[name] = translate_speed.ForcedLength(CompiledDecoder(compiled_model, fixed_rows),
                                                     eager.ratio, eager.eos)
    for beam in (1, 4):
        cfg = DecodeConfig(beam=beam)
        search = "greedy" if beam == 1 else f"beam{beam}"
        outputs = {}
        for name, model in designs.items():
            start = time.perf_counter()
            with torch.inference_mode():  # the first batches pay the compilation
                found = [greedy_search(model, src, cfg, special) if beam == 1 else
                         [best[0] for best in beam_search(model, src, cfg, special)]
                         for src in sources[:2]]
            outputs[name] = [hyp.tokens for batch in found for hyp in batch]
            figure(figure="warm_up", search=search, design=name,
                   seconds=round(time.perf_counter() - start, 1))
        for name in designs:
            figure(figure="identical", search=search, design=name, of=len(outputs["eager"]),
                   value=sum(a == b for a, b in zip(outputs[name], outputs["eager"])))
        speeds: dict[str, list[float]] = {name: [] for name in designs}
        for _ in range(args.rounds):
            for name, model in designs.items():
                seconds, _, _, tokens = translate_speed.run(model, sources, cfg, special,
                                                            workers=args.workers)
                speeds[name].append(tokens / seconds)
        for name, values in speeds.items():
            figure(figure="search", search=search, design=name, precision=args.precision,
                   workers=args.workers,
                   batch_size=args.batch_size, tokens_per_s=[round(v, 1) for v in values],
                   ratio_to_eager=round(sum(values) / sum(speeds["eager"]), 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2,
                        help="batches decoded at once, each on one thread")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32",
                        help="of the search comparison (int8: dynamic quantization, its "
                        "linear layers opaque operators in the compiled step)")
    parser.add_argument("--search-only", action="store_true",
                        help="leave out the gemm and attention figures")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        vocab = Vocab.load(translate_speed.learn_vocab(args.vocab_size, Path(workdir)))
        if not args.search_only:
            measure_gemm(len(vocab))
            measure_attention()
        measure_search(args, vocab)


if __name__ == "__main__":
    main()
