"""`nmt calibrate`: fit the confidence of a model's translations and store it in the model
file.

The model translates a held-out split (validation by default); each translation gets its
features (transformer_nmt.decode.quality.confidence) and a label: whether its sentence chrF2
against the reference reaches a threshold, by default the median of the split's, so that
'acceptable' means 'at least as good as this model's typical held-out sentence' (a proxy
for a bilingual reader's judgement, computed without people). A logistic regression on
the standardized features is fitted to those labels and written into the model file
under `calibration`, atomically.

The fit is a few coefficients: PyTorch, already a dependency, does it (L-BFGS on the
binary cross-entropy with scikit-learn's default L2 penalty, C = 1) rather than adding
scikit-learn, about 50 MB, for it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from tqdm import tqdm

from transformer_nmt.data.text import read_lines
from transformer_nmt.decode.text.batches import BatchBudget, length_batches
from transformer_nmt.decode.quality.confidence import Calibration, sentence_features
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.evaluate import read_text, sentence_chrf, split_languages, split_paths
from transformer_nmt.model_dir import is_model_dir
from transformer_nmt.model_file import load_for_inference, read_model_file, save_model_file

MIN_EACH = 5
"""Fewest acceptable and unacceptable translations a fit needs."""
FEATURE_BATCH = 32
"""Translations whose features one decoder pass computes."""


def fit_logistic(features: list[list[float]], accepted: list[bool]
                 ) -> tuple[list[float], list[float], list[float], float]:
    """(means, standard deviations, coefficients, intercept) of the L2-penalized logistic
    regression of `accepted` on the standardized `features` (one row per translation)."""
    x = torch.tensor(features, dtype=torch.float64)  # (n, features)
    y = torch.tensor(accepted, dtype=torch.float64)  # (n,)
    means, stds = x.mean(0), x.std(0, unbiased=False).clamp(min=1e-6)
    z = (x - means) / stds
    weights = torch.zeros(x.size(1), dtype=torch.float64, requires_grad=True)
    share = float(y.mean())
    intercept = torch.tensor(math.log(share / (1 - share)), dtype=torch.float64,
                             requires_grad=True)
    optimizer = torch.optim.LBFGS([weights, intercept], max_iter=500, tolerance_grad=1e-10,
                                  tolerance_change=1e-12, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        # scikit-learn's C = 1: the summed log-loss plus half the squared weights, per row.
        value = (F.binary_cross_entropy_with_logits(z @ weights + intercept, y)
                 + 0.5 * weights.square().sum() / len(accepted))
        value.backward()
        return value

    optimizer.step(loss)
    return means.tolist(), stds.tolist(), weights.detach().tolist(), float(intercept.detach())


def fit_quality(probabilities: list[float], accepted: list[bool]) -> dict[str, float]:
    """log_loss of `probabilities` against `accepted`, base_log_loss (always predicting
    their share), and auc: the chance that an accepted translation ranks above a rejected
    one (ties half)."""
    p = torch.tensor(probabilities, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
    y = torch.tensor(accepted, dtype=torch.float64)
    share = y.mean().clamp(1e-12, 1 - 1e-12)
    positive, negative = p[y.bool()], p[~y.bool()]
    above = positive.unsqueeze(1) - negative.unsqueeze(0)  # (accepted, rejected)
    return {"log_loss": round(float(F.binary_cross_entropy(p, y)), 4),
            "base_log_loss": round(float(F.binary_cross_entropy(share.expand_as(y), y)), 4),
            "auc": round(float((above.gt(0).double() + 0.5 * above.eq(0).double()).mean()), 4)}


def translation_features(translator: Translator, sources: list[list[int]],
                         outputs: list[list[int]]) -> list[list[float]]:
    """The confidence features of each output token list as a translation of its source
    ids, FEATURE_BATCH at a time, in batches of similar length."""
    found: list[list[float]] = [[] for _ in sources]
    for rows in length_batches([len(source) for source in sources], range(len(sources)),
                               BatchBudget(FEATURE_BATCH)):
        values = sentence_features(translator.model,
                                   translator.source_tensor([sources[i] for i in rows]),
                                   [outputs[i] for i in rows], translator.special)
        for row, row_values in zip(rows, values):
            found[row] = row_values
    return found


def calibrate(model_path: str | Path, data_dir: str | Path, split: str = "valid",
              out: str | Path | None = None, threshold: float | None = None,
              options: TranslatorOptions = TranslatorOptions(),
              log: Callable[[str], None] = print) -> Calibration:
    """Fit the confidence of the model at `model_path` on DATA_DIR's `split` and write the
    model file again, with it, to `out` (None: in place). threshold: the sentence chrF2
    a translation must reach to count as acceptable (None: the split's median)."""
    model_path = Path(model_path)
    out = model_path if out is None else Path(out)
    if is_model_dir(model_path) or out.is_dir():
        raise UserError(f"{model_path if is_model_dir(model_path) else out}: a directory; "
                        "calibrate a model file (.pt), then export it")
    loaded = load_for_inference(model_path, "cpu")
    loaded.payload_meta.pop("calibration", None)  # no confidence while fitting a new one
    translator = Translator(loaded, options)
    src_lang, tgt_lang = split_languages(data_dir, None, None)
    if translator.languages is not None and translator.languages != (src_lang, tgt_lang):
        raise UserError(f"{model_path} translates {'-'.join(translator.languages)}, but "
                        f"{data_dir} is {src_lang}-{tgt_lang}; calibrate on its own direction")
    src_path, ref_path = split_paths(data_dir, split, src_lang, tgt_lang)
    lines, references = list(read_lines(src_path)), read_text(ref_path)
    log(f"translating {len(lines)} sentences of {data_dir} {split}")
    best = [found[0] for found in tqdm(translator.translate_nbest(lines), total=len(lines),
                                       unit=" lines", desc="translating")]
    kept = [i for i, line in enumerate(lines) if line.strip()]
    sources = translator.source_ids([lines[i] for i in kept])
    features = translation_features(translator, sources, [best[i].tokens for i in kept])
    chrf = sentence_chrf([best[i].text for i in kept], [references[i] for i in kept])
    how = "given"
    if threshold is None:
        threshold, how = statistics.median(chrf), f"the median of {split}"
    accepted = [value >= threshold for value in chrf]
    if min(sum(accepted), len(accepted) - sum(accepted)) < MIN_EACH:
        raise UserError(f"{sum(accepted)} of {len(accepted)} translations of {split} reach "
                        f"chrF2 {threshold:g}: a fit needs at least {MIN_EACH} on each side; "
                        "give another --threshold or a larger split")
    means, stds, coefficients, intercept = fit_logistic(features, accepted)
    calibration = Calibration(
        tuple(means), tuple(stds), tuple(coefficients), intercept,
        target=f"sentence chrF2 against the reference >= {threshold:.2f} ({how})",
        threshold=round(threshold, 4), split=split, sentences=len(accepted),
        accepted=round(sum(accepted) / len(accepted), 4))
    quality = fit_quality([calibration.probability(row) for row in features], accepted)
    calibration = replace(calibration, quality=quality)
    payload = read_model_file(model_path)
    payload["calibration"] = calibration.to_dict()
    save_model_file(payload, out)
    log(f"calibrated on {len(accepted)} translations, {calibration.accepted:.0%} acceptable "
        f"({calibration.target}): log-loss {quality['log_loss']:.3f} against "
        f"{quality['base_log_loss']:.3f} for a constant, AUC {quality['auc']:.3f}; wrote {out}")
    return calibration


def calibration_summary(payload_meta: dict[str, Any]) -> dict[str, Any] | None:
    """What a model file's calibration says about itself, for people: its target, split,
    size and fit; None when the model has none."""
    stored = payload_meta.get("calibration")
    if not isinstance(stored, dict):
        return None
    return {key: stored.get(key) for key in ("target", "threshold", "split", "sentences",
                                             "accepted", "quality")}
