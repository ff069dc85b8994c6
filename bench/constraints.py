"""Terminology constraints on a trained model: how many dictionary terms appear in the
translations with and without `--constraints`, BLEU of both, and the speed cost.

The terms are simulated from the references (as Post & Vilar 2018 sample reference
phrases): per sentence, 1 or 2 words of at least 5 letters drawn at random (seeded)
from its reference translation. A term counts as appearing when it is one of the
translation's words (split at whitespace, punctuation stripped at their ends). Plain
beam search runs first, constrained second, same model, same settings, same process:
the speed ratio is constrained/plain.

    python bench/constraints.py --model M.pt --src test.en --ref test.de [--sentences 200]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import sacrebleu

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import read_lines
from transformer_nmt.decode.text.translator import Translator, TranslationRequest, TranslatorOptions

PUNCTUATION = ".,;:!?\"'()[]«»„“”‘’-"


def words(text: str) -> list[str]:
    return [word.strip(PUNCTUATION) for word in text.split()]


def pick_terms(reference: str, rng: random.Random) -> tuple[str, ...]:
    """1 or 2 distinct words of >= 5 letters from the reference (none if it has none)."""
    candidates = sorted({word for word in words(reference) if len(word) >= 5 and word.isalpha()})
    return tuple(rng.sample(candidates, min(len(candidates), rng.randint(1, 2))))


def term_share(translations: list[str], terms: list[tuple[str, ...]]) -> float:
    present = sum(term in set(words(text)) for text, line_terms in zip(translations, terms)
                  for term in line_terms)
    return present / max(sum(len(line_terms) for line_terms in terms), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True, help="source sentences")
    parser.add_argument("--ref", required=True, help="their reference translations")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    sources = list(read_lines(args.src))[: args.sentences]
    references = list(read_lines(args.ref))[: args.sentences]
    rng = random.Random(args.seed)
    terms = [pick_terms(reference, rng) for reference in references]
    translator = Translator.from_file(args.model, TranslatorOptions(
        decode=DecodeConfig(beam=args.beam)))
    results = {}
    for name, requests in (("plain", [TranslationRequest(s) for s in sources]),
                           ("constrained", [TranslationRequest(s, constraints=t)
                                            for s, t in zip(sources, terms)])):
        start = time.perf_counter()
        translations = [hyps[0].text for hyps in translator.translate_nbest(requests)]
        seconds = time.perf_counter() - start
        results[name] = {
            "search": name, "beam": args.beam, "sentences": len(sources),
            "terms": sum(len(t) for t in terms),
            "term_share": round(term_share(translations, terms), 4),
            "sacrebleu": round(sacrebleu.corpus_bleu(translations, [references]).score, 2),
            "sentences_per_s": round(len(sources) / seconds, 2),
            "seconds": round(seconds, 2)}
        print(json.dumps(results[name]))
    print(json.dumps({"ratio": "constrained/plain", "sentences_per_s": round(
        results["constrained"]["sentences_per_s"] / results["plain"]["sentences_per_s"], 3)}))


if __name__ == "__main__":
    main()
