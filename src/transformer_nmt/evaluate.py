"""Scoring translations: sacreBLEU, chrF, and the paper's tokenized BLEU.

- sacreBLEU (Post 2018): BLEU of detokenized text with sacrebleu's own 13a tokenization,
  reported with its signature; the number to compare across papers.
- chrF2: character n-gram F-score, also from sacrebleu.
- Tokenized BLEU, as the paper's numbers were computed (tensor2tensor's get_ende_bleu):
  both sides get Moses' unicode punctuation replaced by ASCII (replace-unicode-punctuation,
  e.g. full-width commas and ellipses), are Moses-tokenized (the target language's rules,
  with Moses' escaping), and for German have compounds split at hyphens as
  "Arbeits ##AT##-##AT## Platz"; then BLEU on those tokens, case-sensitive, with no
  further tokenization and no smoothing (multi-bleu.perl's definition). All three Moses
  steps are sacremoses'.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from sacrebleu.metrics import BLEU, CHRF
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from transformer_nmt.data.manifest import read_manifest, text_path
from transformer_nmt.data.text import count_lines, read_lines
from transformer_nmt.decode.text.output import translate_file
from transformer_nmt.decode.text.translator import Translation, Translator, TranslatorOptions
from transformer_nmt.errors import UserError
from transformer_nmt.files import write_json_atomic

_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


def split_compounds(text: str) -> str:
    """Split hyphenated compounds of Moses-tokenized German text: "a-b" -> "a ##AT##-##AT## b".

    Matches are found left to right without overlap, as tensor2tensor's get_ende_bleu
    substitution finds them, so a one-character part between two hyphens is used up by
    the first match: "A-1-B" -> "A ##AT##-##AT## 1-B". The paper's numbers were
    computed that way.
    """
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)


def tokenize_for_bleu(lines: list[str], lang: str) -> list[str]:
    """Moses unicode-punctuation replacement and tokenization with `lang`'s rules, plus
    compound splitting for German: get_ende_bleu's preprocessing, step by step."""
    normalizer = MosesPunctNormalizer(lang=lang)
    tokenizer = MosesTokenizer(lang=lang)
    tokenized = [tokenizer.tokenize(normalizer.replace_unicode_punct(line), return_str=True,
                                    escape=True) for line in lines]
    if lang == "de":
        tokenized = [split_compounds(line) for line in tokenized]
    return tokenized


def read_text(path: str | Path, errors: str = "strict") -> list[str]:
    """Lines of a UTF-8 text file without trailing whitespace, as the sacrebleu CLI reads them.

    errors="replace" turns invalid bytes into U+FFFD instead of stopping with a UserError.
    """
    return [line.rstrip() for line in read_lines(path, errors)]


def score(hypotheses: list[str], references: list[str], tgt_lang: str | None = None) -> dict[str, Any]:
    """sacreBLEU, chrF2 and, when the target language is known, tokenized BLEU.

    Returns a JSON-ready dict: each metric's score, sacrebleu's full result string and
    signature; tokenized BLEU is None without tgt_lang.
    """
    if len(hypotheses) != len(references):
        raise UserError(f"{len(hypotheses)} hypotheses but {len(references)} references; "
                        "they must be aligned line by line")
    if not hypotheses:
        raise UserError("no sentences to score: the hypotheses and references are empty")
    bleu, chrf = BLEU(), CHRF()
    bleu_result = bleu.corpus_score(hypotheses, [references])
    chrf_result = chrf.corpus_score(hypotheses, [references])
    result: dict[str, Any] = {
        "sentences": len(hypotheses),
        "bleu": bleu_result.score,
        "bleu_result": str(bleu_result),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": chrf_result.score,
        "chrf_signature": str(chrf.get_signature()),
        "tokenized_bleu": None,
        "tokenized_bleu_result": None,
        "tokenized_bleu_method": None,
    }
    if tgt_lang:
        # The input is tokenized on purpose: force silences sacrebleu's warning about it.
        tok_bleu = BLEU(tokenize="none", smooth_method="none", force=True)
        tok_result = tok_bleu.corpus_score(tokenize_for_bleu(hypotheses, tgt_lang),
                                           [tokenize_for_bleu(references, tgt_lang)])
        method = f"sacremoses replace-unicode-punctuation + tokenizer -l {tgt_lang}"
        if tgt_lang == "de":
            method += " + ##AT## compound splitting"
        result.update(tokenized_bleu=tok_result.score, tokenized_bleu_result=str(tok_result),
                      tokenized_bleu_method=f"{method}; {tok_bleu.get_signature()}")
    return result


def sentence_chrf(hypotheses: list[str], references: list[str]) -> list[float]:
    """chrF2 of each hypothesis against its reference, as sacrebleu scores one sentence."""
    chrf = CHRF()
    return [chrf.sentence_score(hypothesis, [reference]).score
            for hypothesis, reference in zip(hypotheses, references)]


TOP_SHARES = (0.5, 0.8, 0.9)
"""The shares of most confident sentences whose BLEU the confidence report gives."""


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    spread = math.sqrt(sum((x - mean_x) ** 2 for x in xs) * sum((y - mean_y) ** 2 for y in ys))
    return covariance / spread if spread else None


def _ranks(values: list[float]) -> list[float]:
    """Each value's rank from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def confidence_report(confidences: list[float], hypotheses: list[str],
                      references: list[str], threshold: float) -> dict[str, Any]:
    """How well the confidences rank the translations: their Pearson and Spearman
    correlation with sentence chrF2, the BLEU (and chrF2) of the TOP_SHARES most
    confident sentences against all, and the mean confidence beside the share of
    sentences that reach the calibration's chrF2 `threshold` (what it estimates)."""
    chrf = sentence_chrf(hypotheses, references)
    order = sorted(range(len(confidences)), key=lambda i: -confidences[i])
    top = {}
    for share in (*TOP_SHARES, 1.0):
        chosen = order[: max(math.ceil(share * len(order)), 1)]
        picked = [hypotheses[i] for i in chosen], [[references[i] for i in chosen]]
        top[f"{share:.0%}"] = {"sentences": len(chosen),
                              "bleu": round(BLEU().corpus_score(*picked).score, 2),
                              "chrf": round(CHRF().corpus_score(*picked).score, 2)}
    pearson, spearman = _pearson(confidences, chrf), _pearson(_ranks(confidences), _ranks(chrf))
    return {"sentences": len(confidences),
            "pearson_chrf": None if pearson is None else round(pearson, 4),
            "spearman_chrf": None if spearman is None else round(spearman, 4),
            "top": top, "mean_confidence": round(sum(confidences) / len(confidences), 4),
            "reaching_threshold": round(sum(value >= threshold for value in chrf) / len(chrf), 4),
            "threshold": threshold}


def format_confidence(report: dict[str, Any]) -> str:
    """The confidence report as a few lines for people."""
    lines = [f"confidence on {report['sentences']} sentences: correlation with sentence chrF2 "
             f"{report['pearson_chrf']} (Pearson), {report['spearman_chrf']} (Spearman); mean "
             f"{report['mean_confidence']:.2f}, {report['reaching_threshold']:.0%} reach its "
             f"target (chrF2 >= {report['threshold']:g})"]
    for share, scores in report["top"].items():
        label = "all" if share == "100%" else f"the {share} most confident"
        lines.append(f"  BLEU {scores['bleu']:6.2f}  chrF2 {scores['chrf']:6.2f}  "
                     f"{label} ({scores['sentences']} sentences)")
    return "\n".join(lines)


def format_table(result: dict[str, Any]) -> str:
    """A small plain-text table of the scores in `result` (as `score` returns)."""
    rows = [("metric", "score", "details"),
            ("BLEU", f"{result['bleu']:.2f}", result["bleu_signature"]),
            ("chrF2", f"{result['chrf']:.2f}", result["chrf_signature"])]
    if result["tokenized_bleu"] is not None:
        rows.append(("tokenized BLEU", f"{result['tokenized_bleu']:.2f}",
                     result["tokenized_bleu_method"]))
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{row[0].ljust(widths[0])}  {row[1].rjust(widths[1])}  {row[2]}"
                     for row in rows)


def evaluate_files(hyp_path: str | Path, ref_path: str | Path, tgt_lang: str | None = None,
                   json_path: str | Path | None = None, errors: str = "strict") -> dict[str, Any]:
    """Score an existing hypothesis file against a reference file (one sentence per line)."""
    result = score(read_text(hyp_path, errors), read_text(ref_path, errors), tgt_lang)
    result.update(hyp=str(hyp_path), ref=str(ref_path), tgt_lang=tgt_lang)
    if json_path is not None:
        write_json_atomic(json_path, result)
    return result


def split_languages(data_dir: str | Path, src_lang: str | None,
                    tgt_lang: str | None) -> tuple[str, str]:
    """The data directory's languages from its manifest; src_lang/tgt_lang override."""
    if src_lang and tgt_lang:
        return src_lang, tgt_lang
    manifest = read_manifest(data_dir)
    return src_lang or manifest["src_lang"], tgt_lang or manifest["tgt_lang"]


def split_paths(data_dir: str | Path, split: str, src_lang: str, tgt_lang: str
                ) -> tuple[Path, Path]:
    """(source, reference) text files of DATA_DIR's `split`; UserError if one is missing."""
    paths = text_path(data_dir, split, src_lang), text_path(data_dir, split, tgt_lang)
    for path in paths:
        if not path.is_file():
            raise UserError(f"{path}: no such file; is {split!r} a split of {data_dir}?")
    return paths


def evaluate_model(model_path: str | Path | Sequence[str | Path], data_dir: str | Path,
                   split: str = "test",
                   options: TranslatorOptions = TranslatorOptions(),
                   src_lang: str | None = None, tgt_lang: str | None = None,
                   json_path: str | Path | None = None,
                   hyp_path: str | Path | None = None) -> dict[str, Any]:
    """Translate DATA_DIR/{split}.{src_lang} with a model file (or an ensemble of
    several), decoding as `options` say, and score it.

    The hypotheses go to `hyp_path` (default MODEL.{split}.hyp, MODEL being the model
    path without its suffix) and the scores, with the decode settings, to `json_path`
    (default MODEL.eval-{split}.json). Returns the scores, with 'json' (where they were
    written) and 'speed' (a line saying how fast the split was translated) added. A
    calibrated model's result has 'confidence' too, how well its confidence ranks the
    sentences (`confidence_report`); None otherwise.
    """
    src_lang, tgt_lang = split_languages(data_dir, src_lang, tgt_lang)
    src_path, ref_path = split_paths(data_dir, split, src_lang, tgt_lang)
    # Several model files: an ensemble (Translator.from_files), named after the first.
    paths = [model_path] if isinstance(model_path, (str, Path)) else list(model_path)
    model_path = paths[0] if len(paths) == 1 else " + ".join(str(path) for path in paths)
    stem = Path(paths[0]).with_suffix("")
    hyp_path = Path(hyp_path) if hyp_path is not None else Path(f"{stem}.{split}.hyp")
    json_path = Path(json_path) if json_path is not None else Path(f"{stem}.eval-{split}.json")
    translator = Translator.from_files(paths, options)
    if translator.languages is not None and translator.languages != (src_lang, tgt_lang):
        raise UserError(f"{model_path} translates {'-'.join(translator.languages)}, but "
                        f"{data_dir} {split} is {src_lang}-{tgt_lang}; evaluate the model on "
                        "data of its own direction")
    confidences: list[float | None] = []

    def note_confidence(found: list[Translation]) -> None:
        confidences.append(found[0].confidence)

    try:
        speed = translate_file(translator, read_lines(src_path), hyp_path,
                               total=count_lines(src_path),
                               observe=None if translator.confidence is None
                               else note_confidence)
    finally:
        translator.close()
    hypotheses, references = read_text(hyp_path), read_text(ref_path)
    result = score(hypotheses, references, tgt_lang)
    rated = [i for i, value in enumerate(confidences) if value is not None]
    result["confidence"] = confidence_report(
        [confidences[i] for i in rated], [hypotheses[i] for i in rated],
        [references[i] for i in rated], translator.confidence.calibration.threshold
    ) if rated else None
    result.update(model=str(model_path), data=str(data_dir), split=split, src_lang=src_lang,
                  tgt_lang=tgt_lang, hyp=str(hyp_path), ref=str(ref_path),
                  decode=asdict(options.decode), precision=translator.options.precision)
    write_json_atomic(json_path, result)
    result["json"] = str(json_path)
    result["speed"] = speed.summary(hyp_path)
    return result

