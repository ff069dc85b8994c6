"""The named presets of the paper: the base model, every row of Table 3, the big model,
and a few of our own for CPUs, students and tests.

Every preset is a small function of the base `ModelConfig` that changes a few fields,
kept in one registry, `PRESETS`, with the training settings it was reported with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from transformer_nmt.config.settings import NOT_ARCHITECTURE, ModelConfig, TrainConfig
from transformer_nmt.errors import UserError


@dataclass(frozen=True)
class Preset:
    """A named architecture with the training settings it was reported with."""

    name: str
    description: str
    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)
    paper_params_millions: float | None = None
    """The 'params x 10^6' column of Table 3, where the paper gives one."""


BASE = ModelConfig()
SMALL_RUN = TrainConfig(batch_tokens=4096, warmup_steps=1000, lr_scale=0.5, max_steps=100_000)
"""The small preset's training regime."""
SHORT_RUN = replace(SMALL_RUN, batch_tokens=2048, warmup_steps=300, save_every_minutes=1.0,
                    lr_scale=round(SMALL_RUN.lr_scale * math.sqrt(300 / SMALL_RUN.warmup_steps),
                                   6))
"""The quickstart's regime for a run of minutes on a CPU (its defaults), which student-tiny
trains with: 2048-token batches, 300 warm-up steps to the small preset's peak learning
rate (eq. 3 peaks at lr_scale * warmup^-0.5 per d_model^-0.5), and a checkpoint a minute,
for averaging the last two."""


def _row(name: str, description: str, paper: float | None = None,
         train: TrainConfig | None = None, **changes) -> Preset:
    return Preset(name, description, replace(BASE, **changes), train or TrainConfig(), paper)


def _build_presets() -> dict[str, Preset]:
    presets = [
        _row("base", "the paper's base model", 65),
        _row("big", "the paper's big model", 213, train=TrainConfig(max_steps=300_000),
             d_model=1024, d_ff=4096, heads=16, dropout=0.3),
        # Table 3 (A): heads, with d_k = d_v = d_model / h (constant computation).
        _row("a-h1", "Table 3 (A): 1 head, d_k = d_v = 512", heads=1, d_k=512, d_v=512),
        _row("a-h4", "Table 3 (A): 4 heads, d_k = d_v = 128", heads=4, d_k=128, d_v=128),
        _row("a-h16", "Table 3 (A): 16 heads, d_k = d_v = 32", heads=16, d_k=32, d_v=32),
        _row("a-h32", "Table 3 (A): 32 heads, d_k = d_v = 16", heads=32, d_k=16, d_v=16),
        # Table 3 (B): smaller keys only.
        _row("b-dk16", "Table 3 (B): d_k = 16", 58, d_k=16),
        _row("b-dk32", "Table 3 (B): d_k = 32", 60, d_k=32),
        # Table 3 (C): depth and width.
        _row("c-n2", "Table 3 (C): N = 2", 36, encoder_layers=2, decoder_layers=2),
        _row("c-n4", "Table 3 (C): N = 4", 50, encoder_layers=4, decoder_layers=4),
        _row("c-n8", "Table 3 (C): N = 8", 80, encoder_layers=8, decoder_layers=8),
        _row("c-d256", "Table 3 (C): d_model = 256, d_k = d_v = 32", 28,
             d_model=256, d_k=32, d_v=32),
        _row("c-d1024", "Table 3 (C): d_model = 1024, d_k = d_v = 128", 168,
             d_model=1024, d_k=128, d_v=128),
        _row("c-ff1024", "Table 3 (C): d_ff = 1024", 53, d_ff=1024),
        _row("c-ff4096", "Table 3 (C): d_ff = 4096", 90, d_ff=4096),
        # Table 3 (D): regularisation.
        _row("d-drop0", "Table 3 (D): P_drop = 0.0", dropout=0.0),
        _row("d-drop2", "Table 3 (D): P_drop = 0.2", dropout=0.2),
        _row("d-ls0", "Table 3 (D): label smoothing 0.0", train=TrainConfig(label_smoothing=0.0)),
        _row("d-ls2", "Table 3 (D): label smoothing 0.2", train=TrainConfig(label_smoothing=0.2)),
        # Table 3 (E): learned positional embeddings.
        _row("e-learned", "Table 3 (E): learned positional embeddings", positional="learned"),
        # CPU presets.
        _row("small", "3+3 layers, d_model 256: a corpus of ~30k pairs on a laptop CPU",
             train=SMALL_RUN, encoder_layers=3, decoder_layers=3, d_model=256, d_ff=1024, heads=4,
             d_k=64, d_v=64, dropout=0.3, max_positions=512),
        # Distilled students: decoding cost sits in the decoder, which runs once per output
        # token, so depth goes to the encoder, which runs once per sentence (Kim & Rush
        # 2016; the Bergamot students keep 6 encoder and 2 decoder layers). Pre-norm: with
        # the paper's post-norm, a six-layer encoder learned so slowly in a short run that
        # the decoder did without it. student-tiny has at most half the small preset's
        # parameters (the shared 8000-piece embedding alone is a quarter of them at
        # d_model 256); its shape was chosen by distilling the quickstart's model.
        _row("student-tiny", "3+1 layers, d_model 192, pre-norm: a student of the small "
             "preset for `nmt distill`, fast greedy decoding on a CPU", train=SHORT_RUN,
             encoder_layers=3, decoder_layers=1, d_model=192, d_ff=768, heads=4,
             d_k=48, d_v=48, dropout=0.1, max_positions=512, pre_norm=True),
        # student-base is student-tiny's shape scaled to the base preset (the teacher's
        # encoder depth, one decoder layer, three quarters of its width), so that it too
        # has under half its teacher's parameters; no base teacher has been distilled yet.
        _row("student-base", "6+1 layers, d_model 384, pre-norm: a student of the base preset "
             "for `nmt distill`", encoder_layers=6, decoder_layers=1, d_model=384, d_ff=1536,
             heads=8, d_k=48, d_v=48, pre_norm=True),
        _row("tiny", "2+2 layers, d_model 32: tests and smoke runs",
             train=TrainConfig(batch_tokens=512, warmup_steps=50, max_steps=200),
             encoder_layers=2, decoder_layers=2, d_model=32, d_ff=64, heads=4,
             d_k=8, d_v=8, dropout=0.1, max_positions=256),
    ]
    return {preset.name: preset for preset in presets}


PRESETS: dict[str, Preset] = _build_presets()


def preset_of_architecture(cfg: ModelConfig) -> str | None:
    """The preset whose architecture `cfg` has (its dropout rates aside, see
    NOT_ARCHITECTURE), or None for a custom one."""
    same_training = {name: getattr(cfg, name) for name in NOT_ARCHITECTURE}
    for preset in PRESETS.values():
        if replace(preset.model, **same_training) == cfg:
            return preset.name
    return None


def get_preset(name: str) -> Preset:
    """The preset called `name`, or a UserError listing the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(
            f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}"
        ) from None


def presets_table() -> str:
    """A plain-text table of every preset, as `nmt presets` prints it."""
    header = ("name", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls",
              "positional", "paper params", "description")
    rows = [header]
    for preset in PRESETS.values():
        m, t = preset.model, preset.train
        layers = (str(m.encoder_layers) if m.encoder_layers == m.decoder_layers
                  else f"{m.encoder_layers}+{m.decoder_layers}")
        paper = f"{preset.paper_params_millions:g}M" if preset.paper_params_millions else "-"
        rows.append((preset.name, layers, str(m.d_model), str(m.d_ff), str(m.heads),
                     str(m.d_k), str(m.d_v), f"{m.dropout:g}", f"{t.label_smoothing:g}",
                     m.positional, paper, preset.description))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
