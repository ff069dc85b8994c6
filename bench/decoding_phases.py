"""Where a lone sentence's decoding time goes, phase by phase (issue 51).

The Translator decodes --sentences test sentences one at a time (batch_size 1, one
worker, line by line, beam 4), after 3 to warm up, in --precision; the phases of every
search are timed by wrapping them: the encoder (`Transformer.encode`), the decoder's
steps (`Transformer.decode`), the log-softmax over the vocabulary, the search's own step
(`SearchStep.take`: rank, finish, keep), the caches' reorder, and the whole search.
Prints one JSON line: milliseconds per sentence for each phase and in all, and the steps
per sentence. The wrappers add a few microseconds per call.

    python bench/decoding_phases.py --model MODEL.pt --source test.en [--precision bf16]
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

from transformer_nmt.decode.search import searches, step, stepper
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.model import transformer

PHASES = ((transformer.Transformer, "encode", "encoder"),
          (transformer.Transformer, "decode", "decoder_steps"),
          (stepper, "next_token_log_probs", "log_softmax"),
          (step.SearchStep, "take", "search_step"),
          (stepper.Stepper, "reorder", "cache_reorder"),
          (searches, "beam_loop", "whole_search"))


def timed_phases(seconds: collections.Counter, calls: collections.Counter) -> None:
    """Wrap every phase so that its calls add their wall time to `seconds`."""
    for owner, name, phase in PHASES:
        original = getattr(owner, name)

        def wrapper(*args, _original=original, _phase=phase, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_phase] += time.perf_counter() - start
                calls[_phase] += 1

        setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--precision", default="bf16")
    args = parser.parse_args()
    seconds, calls = collections.Counter(), collections.Counter()
    timed_phases(seconds, calls)
    lines = args.source.read_text(encoding="utf-8").splitlines()[: args.sentences + 3]
    translator = Translator.from_file(args.model, TranslatorOptions(
        precision=args.precision, batch_size=1, workers=1, buffer_size=1))
    for line in lines[:3]:
        translator.translate_batch([line])
    seconds.clear()
    calls.clear()
    start = time.perf_counter()
    for line in lines[3:]:
        translator.translate_batch([line])
    total = time.perf_counter() - start
    count = len(lines) - 3
    print(json.dumps(dict(
        figure="phases", precision=translator.options.precision, sentences=count,
        ms_per_sentence=round(total / count * 1000, 1),
        steps_per_sentence=round(calls["search_step"] / count, 1),
        **{f"{phase}_ms": round(seconds[phase] / count * 1000, 1)
           for _, _, phase in PHASES})), flush=True)


if __name__ == "__main__":
    main()
