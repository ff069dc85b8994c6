"""How far to trust a translation: a few numbers that one teacher-forced pass of the model
gives about it (`sentence_features`), and the calibration that turns them into the
probability that the sentence is acceptable (`Calibration`, fitted by `nmt calibrate`,
transformer_nmt.calibrate).

The features (FEATURES) are defined in transformer_nmt.decode.search.features: what
one teacher-forced decoder pass over the chosen output gives (`sentence_features`), or, the
same numbers up to rounding, what the search gathered while it made it
(transformer_nmt.decode.search.feature_track).

The agreement of an n-best list is left out: the default search returns one hypothesis,
and asking it for more would make every translation slower.

A degenerate translation (transformer_nmt.decode.quality.degenerate: repeating, far too long or
short, a copy of its source, no letter or digit) gets confidence 0 with the reasons in words,
whatever its features: the degenerate bounds flag none of the reference translations they
were drawn from, so what they flag is not what a reader accepts, while a calibration
fitted mostly on sound outputs gave an empty output for a sentence of digits an even
chance.

A calibration is plain numbers, stored under the model file's `calibration` key: the
features' means and standard deviations on the split it was fitted on, and a logistic
regression's coefficients over the standardized features. Applying it is a dot product
and a sigmoid; the fitting is transformer_nmt.calibrate's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from transformer_nmt.decode.search.features import (CALIBRATION_VERSION, FEATURES,
                                                         StepSums, all_features,
                                                         heads_averaged, token_entropy)
from transformer_nmt.decode.quality.degenerate import (COPIES_SOURCE, ONLY_SYMBOLS, REPEATS,
                                                TOO_LONG, TOO_SHORT)
from transformer_nmt.decode.search.ensemble import Ensemble
from transformer_nmt.decode.quality.guard import output_reasons
from transformer_nmt.decode.search.teacher_forced import teacher_forced_pass
from transformer_nmt.decode.search.base import Seq2Seq, SpecialIds, source_lengths
from transformer_nmt.decode.attention.probe import probe_layer
from transformer_nmt.errors import UserError
from transformer_nmt.model_file import InferenceModel

LOW_CONFIDENCE = 0.5
"""Below this, a translation says why (Translation.confidence_reasons)."""
REASON_MARGIN = 0.5
"""How much a feature must lower the log-odds, against a sentence with every feature at
its mean (Calibration.means), to be named as a reason."""
MOST_REASONS = 2
"""Most reasons a low confidence names, most telling first."""

_GROUPS = {
    "mean_log_prob": ("mean_log_prob",), "min_log_prob": ("min_log_prob",),
    "mean_entropy": ("mean_entropy",),
    "length": ("log_length_ratio", "log_length_ratio_squared"),
    "unattended_source": ("unattended_source",), "repeated_bigrams": ("repeated_bigrams",),
    "copied_tokens": ("copied_tokens",),
}
"""Features that one reason names together: the length's two terms make one curve."""
_REASONS = {
    "mean_log_prob": ("the model finds its words unlikely", -1),
    "min_log_prob": ("has a word the model finds unlikely", -1),
    "mean_entropy": ("the model hesitates between words", 1),
    "unattended_source": ("leaves source words unattended", 1),
    "repeated_bigrams": ("repeats a word", 1),
    "copied_tokens": ("copies source words untranslated", 1),
}
"""Each feature's reason, and on which side of its mean (1: above, -1: below) the value must
lie for the reason to be true: a fit may weigh a feature against its name (attending to
every source token lowering the confidence), and then that feature names no reason."""
BASE_RATE_REASON = "this model's translations are seldom acceptable"
"""The reason of a low confidence that no feature explains: the model's own base rate."""
DEGENERATE_REASONS = {
    REPEATS: "repeats a word", TOO_LONG: "much longer than the source",
    TOO_SHORT: "much shorter than the source", COPIES_SOURCE: "copies source words untranslated",
    ONLY_SYMBOLS: "has no letter or digit, though the source has some",
}
"""The confidence reasons of a degenerate translation, worded as the features' are."""


@dataclass(frozen=True)
class Calibration:
    """A fitted logistic regression from FEATURES to the probability that a translation
    meets `target`, with what it was fitted on."""

    means: tuple[float, ...]
    """Each feature's mean on the calibration split."""
    stds: tuple[float, ...]
    """Each feature's standard deviation there (at least a tiny positive number)."""
    coefficients: tuple[float, ...]
    """Log-odds per standard deviation of each feature."""
    intercept: float
    """Log-odds of a translation with every feature at its mean."""
    target: str
    """What 'acceptable' was measured as, in words."""
    threshold: float
    """The sentence chrF2 a translation needed to count as acceptable."""
    split: str
    """The split of the data directory fitted on (`nmt calibrate --split`)."""
    sentences: int
    """Translations fitted on."""
    accepted: float
    """Share of them that were acceptable."""
    quality: dict[str, float] = field(default_factory=dict)
    """How well it fits the split: log_loss, base_log_loss (always predicting
    `accepted`), auc (probability that an acceptable translation ranks above another)."""
    features: tuple[str, ...] = FEATURES
    """The features it weighs, in the order of `coefficients`."""
    version: int = CALIBRATION_VERSION
    """CALIBRATION_VERSION of the code that fitted it."""

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers, strings and lists, for the model file."""
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any, source: str = "model file") -> "Calibration":
        """The calibration a model file stores; UserError naming `source` when it is
        damaged or was made for other features."""
        try:
            calibration = cls(**{key: tuple(value) if isinstance(value, list) else value
                                 for key, value in data.items()})
            sizes = {len(calibration.means), len(calibration.stds),
                     len(calibration.coefficients)}
            float(calibration.intercept)
        except (AttributeError, TypeError, ValueError):
            raise UserError(f"{source}: damaged confidence calibration; run `nmt calibrate` "
                            "on it again") from None
        if (calibration.version != CALIBRATION_VERSION or tuple(calibration.features) != FEATURES
                or sizes != {len(FEATURES)}):
            raise UserError(f"{source}: its confidence calibration was made by another "
                            "version of transformer-nmt; run `nmt calibrate` on it again")
        return calibration

    def contributions(self, values: Sequence[float]) -> list[float]:
        """Each feature's share of the log-odds: coefficient × standardized value."""
        return [weight * (value - mean) / std for weight, value, mean, std
                in zip(self.coefficients, values, self.means, self.stds)]

    def probability(self, values: Sequence[float]) -> float:
        """The probability that a translation with feature `values` is acceptable."""
        log_odds = self.intercept + sum(self.contributions(values))
        return 1 / (1 + math.exp(-max(min(log_odds, 60.0), -60.0)))

    def reasons(self, values: Sequence[float]) -> list[str]:
        """Why a translation with feature `values` gets a low confidence, most telling
        first: the features that lower it most; nothing when it is not low."""
        if self.probability(values) >= LOW_CONFIDENCE:
            return []
        by_name = dict(zip(FEATURES, self.contributions(values)))
        lowering = sorted((sum(by_name[name] for name in names), group)
                          for group, names in _GROUPS.items())
        found = [self._reason(group, values) for share, group in lowering
                 if share < -REASON_MARGIN]
        return [reason for reason in found if reason][:MOST_REASONS] or [BASE_RATE_REASON]

    def _reason(self, group: str, values: Sequence[float]) -> str | None:
        """The words for feature group `group` lowering the confidence, or None when its
        value lies on the side of its mean where the words would be false."""
        if group == "length":
            ratio = FEATURES.index("log_length_ratio")
            longer = values[ratio] > self.means[ratio]
            return f"much {'longer' if longer else 'shorter'} than the source"
        text, side = _REASONS[group]
        index = FEATURES.index(group)
        return text if side * (values[index] - self.means[index]) > 0 else None


@dataclass
class Assessment:
    """How far to trust one translation."""

    confidence: float
    """The probability that a bilingual reader would accept it, as the calibration
    estimates it."""
    reasons: list[str]
    """Why the confidence is low (empty when it is not)."""


@torch.inference_mode()
def sentence_features(model: Seq2Seq, src: Tensor, sequences: list[list[int]],
                      special: SpecialIds) -> list[list[float]]:
    """FEATURES of each output `sequences[i]` (token ids without BOS and EOS) as a
    translation of source row i of src (len(sequences), src_len: ids, EOS, PAD), from
    one teacher-forced decoder pass."""
    rows = torch.arange(len(sequences), device=src.device)
    # log_probs (rows, longest + 1, vocab), picked (rows, longest + 1)
    log_probs, picked, layers = teacher_forced_pass(model, src, rows, sequences, special,
                                                    need_weights=True)
    steps = [len(tokens) + 1 for tokens in sequences]  # tokens with EOS
    source_tokens = source_lengths(src, special.pad)  # (rows,) without EOS
    sums = StepSums.over_positions(picked, token_entropy(log_probs),
                                   heads_averaged(layers[probe_layer(len(layers))]),
                                   steps, source_tokens.tolist())
    from_states = sums.features(torch.tensor(steps, device=src.device), source_tokens)
    return [all_features(states, tokens, src[row, :length].tolist())
            for row, (states, tokens, length)
            in enumerate(zip(from_states.tolist(), sequences, source_tokens.tolist()))]


class ConfidenceEstimator:
    """A calibrated model's confidence in the translations it makes."""

    def __init__(self, model: Seq2Seq, calibration: Calibration, special: SpecialIds) -> None:
        self.model, self.calibration, self.special = model, calibration, special

    @classmethod
    def of(cls, loaded: InferenceModel, model: Seq2Seq, special: SpecialIds
           ) -> "ConfidenceEstimator | None":
        """The estimator of a loaded model's calibration, decoding with `model` (the
        loaded network as a Translator prepared it); None when the file has none, and for
        an ensemble, whose outputs are not those any one calibration describes."""
        stored = loaded.payload_meta.get("calibration")
        if stored is None or isinstance(loaded.model, Ensemble):
            return None
        return cls(model, Calibration.from_dict(stored, str(loaded.path)), special)

    def assess(self, src: Tensor, sequences: list[list[int]]) -> list[Assessment]:
        """The confidence, and its reasons when low, of each output `sequences[i]` as a
        translation of source row i of src (len(sequences), src_len)."""
        return [self._assessment(values)
                for values in sentence_features(self.model, src, sequences, self.special)]

    def _assessment(self, values: Sequence[float]) -> Assessment:
        return Assessment(round(self.calibration.probability(values), 4),
                          self.calibration.reasons(values))

    def attach(self, sources: list[list[int]], translations: list[list[Any]],
               source_tensor: Callable[[list[list[int]]], Tensor],
               pieces: Callable[[Sequence[int]], list[str]],
               gathered: list[list[list[float] | None]] | None = None) -> None:
        """Set the `confidence` and `confidence_reasons` of every Translation in
        translations[i], the translations of source ids sources[i]; a degenerate one gets
        0 and why. source_tensor makes the padded source batch (Translator.source_tensor);
        pieces: the subword pieces of token ids (`Vocab.marked_pieces`). gathered[i][j]:
        what the search gathered for translations[i][j] (Hypothesis.features); those
        without are decoded once more, teacher-forced."""
        pairs = [(source, translation, None if gathered is None else gathered[i][j])
                 for i, (source, found) in enumerate(zip(sources, translations))
                 for j, translation in enumerate(found)]
        unknown = [(source, translation) for source, translation, known in pairs
                   if known is None]
        assessed = iter(self.assess(source_tensor([source for source, _ in unknown]),
                                    [translation.tokens for _, translation in unknown])
                        if unknown else [])
        for source, translation, known in pairs:
            assessment = next(assessed) if known is None else self._assessment(
                all_features(known, translation.tokens, source))
            broken = output_reasons(source, translation.tokens, pieces)
            if broken:
                assessment = Assessment(0.0, [DEGENERATE_REASONS[reason] for reason in broken])
            translation.confidence = assessment.confidence
            translation.confidence_reasons = assessment.reasons
