"""The configurations of model, training and decoding: one frozen dataclass each, a
docstring on every field, the paper's values as defaults, every value checked once.

`ModelConfig` defaults are the paper's base model (Table 3, first row); other
architectures are config/presets.py's. Dropout lives in `ModelConfig` because it shapes
the modules; label smoothing and the schedule live in `TrainConfig` because they shape
training.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Literal, get_args

from transformer_nmt.errors import UserError
from transformer_nmt.fields import check_types, marked, parse_duration, setting

Positional = Literal["sinusoidal", "learned", "sinusoidal-halves", "sinusoidal-fairseq"]
Activation = Literal["relu", "swish", "gelu"]
TieEmbeddings = Literal["all", "decoder", "none"]
TrainPrecision = Literal["auto", "fp32", "bf16", "fp16"]
"""Training precisions: 'auto' is bf16 on a GPU that has it natively, and on a CPU only where
bf16 products measured faster than fp32 by a margin (runtime.auto_training_precision); else fp32."""
DecodePrecision = Literal["auto", "fp32", "bf16", "int8"]
"""Decoding precisions: 'auto' is bf16 where training's 'auto' would be (a GPU that has it
natively; a CPU where bf16 products measured faster than fp32 by a margin), else fp32
(runtime.auto_decoding_precision); fp32; bf16 weights and activations (CPUs with AVX-512
BF16 or AMX, and GPUs), the search's log-probabilities staying float32; int8 dynamic
quantization of the linear layers (CPU only)."""
DecodeEngine = Literal["auto", "ctranslate2", "torch"]
"""The runtime a search runs on: CTranslate2, the paper's search in PyTorch, or 'auto'
(transformer_nmt.decode.runtime.choice)."""
ValidMetric = Literal["loss", "bleu", "chrf"]
"""What validation can rank checkpoints by (TrainConfig.valid_metric)."""
Utf8Errors = Literal["strict", "replace"]
"""What to do with invalid UTF-8 in an input file: stop naming the file and line, or
replace the bad bytes with U+FFFD."""
Quantization = Literal["float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                       "int16", "float16", "bfloat16", "int8_7bit"]
"""CTranslate2's weight types, as an export may store them (declared here, where
`nmt --help` can read them without importing CTranslate2), and int8_7bit: int8 weights
of at most 63, whose products cannot saturate on an x86 CPU without VNNI
(transformer_nmt.decode.runtime.ct2_int8)."""

TRAIN_PRECISIONS = get_args(TrainPrecision)
DECODE_PRECISIONS = get_args(DecodePrecision)
DECODE_ENGINES = get_args(DecodeEngine)
VALID_METRICS = get_args(ValidMetric)
DEFAULT_SHARD_LINES = 2000
"""Input lines per shard of a corpus translation unless told (`nmt translate-corpus`,
`nmt distill`): small enough that the last shard in flight, which one worker finishes
while the others have nothing left, is a minute or two of work on a CPU (larger shards
left one worker idle for a long tail in `nmt distill` on the Bible),
large enough that a shard's own cost stays small beside its lines."""
MAX_BEAM = 1024
"""Widest beam decoding accepts: far beyond any useful width (the paper's is 4), short of
one that would hang a machine on a few lines."""
ALPHA_RANGE = (-10.0, 10.0)
"""Length penalty exponents decoding accepts, from the command line, the library and the
server alike: negative values favour short outputs, and beyond +-10 the penalty swamps
the model's scores."""

def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def _require_at_least(config: object, low: float, *names: str) -> None:
    """UserError unless every field in `names` is a finite number >= `low`."""
    for name in names:
        value = getattr(config, name)
        if not _finite_number(value) or value < low:
            bound = "at least 1" if low == 1 else f"a number >= {low}"
            raise UserError(f"{name} must be {bound}, not {value!r}")


def _require_positive(config: object, *names: str) -> None:
    """UserError unless every field in `names` is a finite number > 0."""
    for name in names:
        value = getattr(config, name)
        if not _finite_number(value) or value <= 0:
            raise UserError(f"{name} must be a positive number, not {value!r}")


def _require_fraction(config: object, *names: str) -> None:
    """UserError unless every field in `names` lies in [0, 1)."""
    for name in names:
        value = getattr(config, name)
        if not _finite_number(value) or not 0 <= value < 1:
            raise UserError(f"{name} must be in [0, 1), not {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """The architecture of one Transformer (sections 3.1-3.5 of the paper). Every field
    is part of the architecture, which a model file must match to be resumed or
    fine-tuned, except those marked architecture=False: they shape training, not weights."""

    encoder_layers: int = 6
    """N, the number of identical encoder layers."""
    decoder_layers: int = 6
    """N, the number of identical decoder layers."""
    d_model: int = 512
    """Width of every sub-layer output and of the embeddings."""
    d_ff: int = 2048
    """Inner width of the position-wise feed-forward network."""
    heads: int = 8
    """h, the number of attention heads."""
    d_k: int = 64
    """Width of each head's queries and keys (independent of d_model / h, Table 3 (A), (B))."""
    d_v: int = 64
    """Width of each head's values."""
    dropout: float = setting(0.1, architecture=False)
    """P_drop: on sub-layer outputs before the residual add and on embedding sums."""
    attention_dropout: float = setting(0.0, architecture=False)
    """Dropout on the attention weights (the paper's slides; 0 in the paper's text)."""
    activation_dropout: float = setting(0.0, architecture=False)
    """Dropout after the FFN's activation (tensor2tensor's relu_dropout; 0 in the paper)."""
    activation: Activation = "relu"
    """The FFN's nonlinearity: 'relu' (eq. 2), 'swish' (x * sigmoid(x), as OPUS-MT's Marian
    models) or 'gelu' (exact, with erf, as Hugging Face's 'gelu')."""
    positional: Positional = "sinusoidal"
    """'sinusoidal' (section 3.5: sines and cosines interleaved), 'learned' (Table 3 row
    (E)), 'sinusoidal-halves' (the same sines in the first half of the dimensions and
    cosines in the second, as Marian lays them out) or 'sinusoidal-fairseq' (fairseq's
    tensor2tensor-style table: halves too, frequencies 10000^(-i / (d_model // 2 - 1)),
    and position p at fairseq's row p + 2)."""
    tie_positions: bool = True
    """With learned positions: one table for the encoder and the decoder (True), or one
    each (False, as fairseq's encoder and decoder have)."""
    max_positions: int = 1024
    """Longest sequence the positional encodings cover: the learned table's size, and the
    longest input and output the model takes, so part of the architecture."""
    scale_embeddings: bool = True
    """Multiply the embeddings by sqrt(d_model) before adding the positions (section 3.4);
    False as fairseq's no_scale_embedding."""
    pre_norm: bool = False
    """False: the paper's LayerNorm(x + Dropout(Sublayer(x))); True: x + Dropout(Sublayer(LayerNorm(x)))."""
    tie_embeddings: TieEmbeddings = "all"
    """'all': source, target and pre-softmax share one matrix (shared vocabulary);
    'decoder': target embedding and pre-softmax only; 'none': three matrices."""
    logits_bias: bool = False
    """Add a bias to the pre-softmax logits, a buffer that is stored but never trained
    (Hugging Face Marian's final_logits_bias), so that imported models keep theirs."""

    def __post_init__(self) -> None:
        check_types(self)
        _require_at_least(self, 1, "encoder_layers", "decoder_layers", "d_model", "d_ff",
                          "heads", "d_k", "d_v")
        _require_at_least(self, 2, "max_positions")
        _require_fraction(self, "dropout", "attention_dropout", "activation_dropout")
        if not self.tie_positions and self.positional != "learned":
            raise UserError(f"tie_positions False needs learned positions; "
                            f"{self.positional!r} ones are one fixed table")


NOT_ARCHITECTURE = marked(ModelConfig, "architecture", False)
"""ModelConfig fields that shape training but no weight: a fine-tuning run may change
them, and they do not tell presets apart."""


@dataclass(frozen=True)
class TrainConfig:
    """The training regime (section 5 of the paper); defaults are the base model's.

    A resumed run must keep every field but those marked resume="free" (when to stop,
    validate, save and log, and how to compute on the hardware at hand) and those marked
    resume="batch split" (how each process makes up its share of batch_tokens), which
    may change unless the old or the new configuration sets both, fixing the batch per
    process and so the global batch itself. valid_metric, valid_beam and
    valid_sentences must match: they decide which checkpoint is best."""

    label_smoothing: float = setting(0.1, metavar="EPS")
    """epsilon_ls of the label-smoothed cross entropy."""
    warmup_steps: int = setting(4000, flag="--warmup", metavar="STEPS")
    """Steps of linear warm-up in lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    (fine-tuning with init_from: 500)."""
    lr_scale: float = setting(1.0, metavar="F")
    """Factor on the learning rate of eq. (3)."""
    lr_peak: float = setting(0.0, metavar="RATE")
    """The rate at step warmup_steps, with the same linear warm-up and inverse-square-root
    decay (0: eq. (3)'s own peak, lr_scale * (d_model * warmup_steps)^-0.5; fine-tuning
    with init_from: 1e-4)."""
    init_from: str = ""
    """A model file or checkpoint whose weights start the run (fine-tuning), with a fresh
    optimizer, step counter and schedule ('': random initialisation)."""
    adam_beta1: float = setting(0.9, metavar="B1")
    """Adam's beta1."""
    adam_beta2: float = setting(0.98, metavar="B2")
    """Adam's beta2."""
    adam_eps: float = setting(1e-9, metavar="EPS")
    """Adam's epsilon."""
    batch_tokens: int = 25000
    """Tokens per side in one optimizer update, padding counted, summed over every process
    and accumulated batch: the paper's batch of ~25000 source and 25000 target tokens.
    Each process trains on its share."""
    max_tokens: int = setting(0, resume="batch split")
    """Most tokens per side, padding counted, in one forward/backward batch of one process:
    a memory cap, the rest of its share being accumulated (0: the process's whole share of
    batch_tokens). Given together with update_freq, the two fix the batch per process and
    batch_tokens is not used."""
    update_freq: int = setting(0, resume="batch split", metavar="K")
    """Batches each process accumulates into one update (0: as many as its share of
    batch_tokens needs under max_tokens)."""
    max_steps: int = setting(100_000, resume="free")
    """Stop after this many optimizer steps (the big preset: 300K)."""
    seed: int = 1
    """Seed of every random choice: initialisation, dropout, batch order."""
    max_epochs: int = setting(0, resume="free")
    """Stop after this many passes over the training data (0: no limit)."""
    max_time: float = setting(0.0, resume="free", parse=parse_duration, metavar="DURATION")
    """Stop after this much training time, summed over resumed sessions: seconds, or 90s,
    10m, 2h, 1h30m (0: no limit)."""
    clip_norm: float = setting(0.0, metavar="NORM")
    """Clip the gradient's global L2 norm to this value (0: no clipping, as in the paper)."""
    max_bad_steps: int = setting(5, resume="free")
    """Stop with an error after this many updates in a row skipped for a non-finite loss or
    gradient, before any NaN reaches the weights (at least 1)."""
    precision: TrainPrecision = setting("auto", resume="free")
    """'auto': bf16 autocast where the device has native bf16, else fp32; 'bf16'
    (autocast); 'fp16' (autocast and a gradient scaler, GPU only); 'fp32'."""
    compile: bool = setting(False, resume="free")
    """Run the model through torch.compile (with shape_buckets, one static graph per
    shape; otherwise with dynamic shapes)."""
    shape_buckets: bool = setting(False, resume="free")
    """Batches of a fixed set of shapes: each side padded to a length of a geometric grid,
    each batch filled with empty rows up to its token budget, for a compiled or captured
    step on a GPU, which builds once per shape. Costs padding; an eager step gains nothing
    from it."""
    valid_every: int = setting(1000, resume="free", metavar="STEPS")
    """Validate every this many steps, and at the end (0: at the end only)."""
    valid_bleu: bool = setting(False, resume="free")
    """Also report BLEU and chrF of the validation set's translations when validating."""
    valid_metric: ValidMetric = "loss"
    """What picks checkpoint_best.pt and drives patience: 'loss' (validation NLL per
    token, lower is better), 'bleu' or 'chrf' (sacreBLEU of the translations, higher)."""
    valid_beam: int = setting(1, metavar="K")
    """Beam of the validation translations (1: greedy search)."""
    valid_sentences: int = 1000
    """Validation sentences translated for BLEU/chrF, the first of the split, which bounds
    the time each validation takes (0: all)."""
    patience: int = setting(0, resume="free")
    """Early stopping: stop after this many validations in a row without a better
    valid_metric (0: never); checkpoint_best.pt holds the best."""
    save_every: int = setting(0, resume="free", metavar="STEPS")
    """Also write a numbered checkpoint every this many steps (0: by time and at the end
    only)."""
    save_every_minutes: float = setting(10.0, resume="free", metavar="MIN")
    """Write a numbered checkpoint every this many minutes, the paper's interval (0: off)."""
    keep_last: int = setting(20, resume="free")
    """Numbered checkpoints kept, the newest (0: keep all); the big model averages the
    last 20."""
    log_every: int = setting(100, resume="free", metavar="STEPS")
    """Log the training loss, learning rate and throughput every this many steps."""

    def __post_init__(self) -> None:
        check_types(self)
        _require_at_least(self, 1, "warmup_steps", "batch_tokens", "max_steps", "log_every",
                          "max_bad_steps", "valid_beam")
        _require_at_least(self, 0, "max_tokens", "update_freq", "seed", "max_epochs", "max_time",
                          "clip_norm", "valid_every", "save_every", "save_every_minutes",
                          "keep_last", "lr_peak", "valid_sentences", "patience")
        if self.valid_beam > MAX_BEAM:
            raise UserError(f"valid_beam must be at most {MAX_BEAM}, not {self.valid_beam}")
        _require_fraction(self, "label_smoothing", "adam_beta1", "adam_beta2")
        _require_positive(self, "lr_scale", "adam_eps")


CHANGEABLE_ON_RESUME = marked(TrainConfig, "resume", "free")
"""TrainConfig fields a resumed run may change."""
BATCH_SPLIT = marked(TrainConfig, "resume", "batch split")
"""TrainConfig fields a resumed run may change unless the old or new configuration sets
them all (see TrainConfig)."""


SAMPLING_ONLY = ("temperature", "topk", "topp")
"""The settings that change nothing but sampling (the seed is left out: it is harmless
without sampling, and kept in settings files); at their field defaults they change nothing."""


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search and sampling settings (section 6.1 of the paper: beam 4, alpha 0.6,
    outputs up to the source length + 50). The group mark files each field under the
    command line's 'search' or 'sampling' options."""

    beam: int = setting(4, group="search", metavar="K")
    """Beam size; 1 is greedy search."""
    alpha: float = setting(0.6, group="search", metavar="ALPHA")
    """Length penalty exponent: hypotheses are ranked by log P(Y|X) / ((5 + |Y|) / 6)^alpha
    (GNMT's), |Y| counting the end-of-sentence token; 0 ranks by log P alone, larger
    values favour longer outputs; between -10 and 10."""
    max_len_a: float = setting(1.0, group="search", metavar="A")
    """An output has at most A * (source subword tokens) + B subword tokens."""
    max_len_b: int = setting(50, group="search", metavar="B")
    """See max_len_a; the paper's outputs are up to the input length + 50."""
    nbest: int = setting(1, metavar="K")
    """Hypotheses returned per sentence, K <= beam (with sampling: K samples drawn per
    sentence)."""
    min_len: int = setting(0, group="search", metavar="N")
    """EOS may not end an output before N subword tokens, as fairseq's --min-len (1 there:
    never an empty output) and CTranslate2's min_decoding_length (0: no minimum). A
    sentence's maximum length wins where it is shorter."""
    no_repeat_ngram: int = setting(0, group="search", metavar="N")
    """Never generate an n-gram of N subword tokens twice in one output, as fairseq's and
    CTranslate2's option of that name (0: off)."""
    guard: bool = setting(True, group="search")
    """Check each best output for degenerate patterns (repeated words, far too long or
    short, a copy of the source, symbols only) and decode such sentences again with
    n-gram blocking, a wider beam and a length cap, keeping the better result; other
    outputs are unchanged. On for translate, serve and evaluate alike, so that evaluate
    scores what translate outputs; samples, random by design, are not checked."""
    sampling: bool = setting(False, group="sampling")
    """Draw each output token at random from the model's distribution instead of
    searching (beam is then unused)."""
    temperature: float = setting(1.0, group="sampling", metavar="T")
    """Sampling: divide the log-probabilities by T before drawing (< 1: more
    conservative)."""
    topk: int = setting(0, group="sampling", metavar="K")
    """Sampling: draw among the K likeliest tokens only (0: all)."""
    topp: float = setting(1.0, group="sampling", metavar="P")
    """Sampling: draw among the likeliest tokens whose probabilities add up to at least P
    (nucleus sampling; 1: all)."""
    seed: int = setting(0, group="sampling", metavar="S")
    """Sampling: the same seed and input line give the same samples, whatever the
    batching."""

    def __post_init__(self) -> None:
        check_types(self)
        _require_at_least(self, 1, "beam")
        if self.beam > MAX_BEAM:
            raise UserError(f"beam must be at most {MAX_BEAM}, not {self.beam}")
        if self.sampling:
            if not 1 <= self.nbest <= MAX_BEAM:
                raise UserError(f"nbest must be between 1 and {MAX_BEAM} samples, not "
                                f"{self.nbest}")
        elif not 1 <= self.nbest <= self.beam:
            raise UserError(f"nbest must be between 1 and the beam size ({self.beam}), "
                            f"not {self.nbest}")
        _require_at_least(self, 0, "no_repeat_ngram", "topk", "seed", "min_len")
        if self.seed >= 2 ** 31:
            raise UserError(f"seed must be at most {2 ** 31 - 1}, not {self.seed}")
        _require_positive(self, "temperature", "topp")
        if self.topp > 1:
            raise UserError(f"topp must be a probability in (0, 1], not {self.topp!r}")
        # A sampling setting without sampling would be ignored in silence: the search is
        # deterministic, and the user most likely forgot --sampling.
        unused = [field.name for field in dataclasses.fields(self)
                  if field.name in SAMPLING_ONLY and getattr(self, field.name) != field.default]
        if unused and not self.sampling:
            verb = "applies" if len(unused) == 1 else "apply"
            raise UserError(f"{', '.join(unused)} {verb} only with sampling: add --sampling "
                            "(sampling: true), or leave them at their defaults")
        _require_at_least(self, 0, "max_len_a", "max_len_b")
        low, high = ALPHA_RANGE
        if not _finite_number(self.alpha) or not low <= self.alpha <= high:
            raise UserError(f"alpha must be a finite number between {low:g} and {high:g}, "
                            f"not {self.alpha!r}")


def config_from_dict(cls: Callable, values: dict):
    """Build dataclass `cls` from a dict, refusing unknown keys with a UserError."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(
            f"unknown {cls.__name__} field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return cls(**values)


def differences(old: object, new: object, skip: frozenset[str] = frozenset(),
                path: str = "") -> list[str]:
    """'key.subkey: old -> new' for every leaf that differs between two configurations:
    dataclasses or nested dicts (keys in `skip` are ignored at every depth)."""
    if dataclasses.is_dataclass(old) and dataclasses.is_dataclass(new):
        old, new = dataclasses.asdict(old), dataclasses.asdict(new)
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in sorted(set(old) | set(new), key=str) if key not in skip
                for change in differences(old.get(key), new.get(key), skip,
                                          f"{path}.{key}" if path else str(key))]
    return [] if old == new else [f"{path}: {old!r} -> {new!r}"]
