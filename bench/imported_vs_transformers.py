"""An imported OPUS-MT-shaped model decoded by us, by transformers' `generate` on the same
weights, and by CTranslate2 on our export, in one run on one machine.

The model: a MarianMTModel of OPUS-MT's base shape (6+6 layers, d_model 512, 8 heads,
FFN 2048, Swish, shared embeddings, logits bias) with random weights and a 58,101-entry
vocabulary, the size of opus-mt-en-de's: the pieces of two sentencepiece models learned
here from the WMT14 training sample, then filler pieces no text produces. It is saved by
transformers itself and imported with `nmt import --from huggingface`.

Protocol, the same for all three: the first --sentences sentences of newstest2014 (en),
sorted by length and cut into batches of --batch sentences (and one sentence at a time,
as a lone user sends them), beam 4 and greedy, float32, --threads threads, outputs of at
most --max-len tokens (a random model rarely ends a sentence by itself, so every output
runs to the limit, and the three do the same work: the outputs are compared; --precision
auto lets ours decode as `nmt translate` would on this CPU). Speed is
output tokens per second, loading excluded; --repeats rounds are run back to back and
the median is printed with each ratio to transformers' speed in the same round.

    python bench/imported_vs_transformers.py --wmt14 ../shared/data/wmt14 --work /tmp/bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import ctranslate2
import sentencepiece as spm
import torch
import transformers

from transformer_nmt.config import DecodeConfig
from transformer_nmt.data.text import read_lines
from transformer_nmt.decode.text.translator import Translator, TranslatorOptions
from transformer_nmt.export.ctranslate2 import export_ctranslate2
from transformer_nmt.model_file import load_for_inference
from transformer_nmt.pretrained.write import import_model

VOCABULARY = 58101
"""opus-mt-en-de's vocabulary size."""


def figure(**values) -> None:
    print(json.dumps(values), flush=True)


def make_model(wmt14: Path, work: Path) -> Path:
    """A base-shape MarianMTModel directory with a 58,101-piece vocabulary, in `work`."""
    directory = work / "opus-mt-shaped"
    if (directory / "config.json").exists():
        return directory
    directory.mkdir(parents=True)
    for side, lang in (("source", "en"), ("target", "de")):
        spm.SentencePieceTrainer.train(
            input=str(wmt14 / f"train-sample10k.tok.{lang}"), model_prefix=str(work / side),
            vocab_size=8000, model_type="unigram", minloglevel=2)
    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for side in ("source", "target"):
        processor = spm.SentencePieceProcessor(model_file=str(work / f"{side}.model"))
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not (processor.is_control(i) or processor.is_unknown(i)) and piece not in seen:
                pieces.append(piece)
                seen.add(piece)
    pieces += [f"<filler{i}>" for i in range(VOCABULARY - 1 - len(pieces))] + ["<pad>"]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (work / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = transformers.MarianConfig(
        vocab_size=len(pieces), d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
        decoder_ffn_dim=2048, activation_function="swish", max_position_embeddings=512,
        pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"],
        forced_eos_token_id=0, scale_embedding=True)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(std=0.1)
    model.save_pretrained(directory)
    transformers.MarianTokenizer(str(work / "source.model"), str(work / "target.model"),
                                 str(work / "vocab.json"), source_lang="en",
                                 target_lang="de").save_pretrained(directory)
    return directory


def batches(lines: list[str], size: int) -> list[list[str]]:
    ordered = sorted(lines, key=len)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def run_transformers(directory: Path, groups: list[list[str]], beam: int, longest: int
                     ) -> tuple[float, list[list[str]]]:
    """(seconds, output pieces of each sentence) of transformers' generate."""
    model = transformers.MarianMTModel.from_pretrained(str(directory)).float().eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(str(directory))
    found, seconds = [], 0.0
    for number, group in enumerate([groups[0], *groups]):  # the first one warms up
        inputs = tokenizer(group, padding=True, return_tensors="pt")
        start = time.perf_counter()
        with torch.inference_mode():
            # One more: at the limit transformers forces an EOS where our search ends.
            output = model.generate(**inputs, num_beams=beam, do_sample=False,
                                    max_new_tokens=longest + 1, early_stopping=True,
                                    length_penalty=0.0)
        if not number:
            continue
        seconds += time.perf_counter() - start
        found += [tokenizer.convert_ids_to_tokens(row, skip_special_tokens=True)
                  for row in output.tolist()]
    return seconds, found


def run_ours(model_file: Path, groups: list[list[str]], beam: int, longest: int,
             precision: str) -> tuple[float, list[list[str]]]:
    """(seconds, output pieces of each sentence) of our Translator, one worker on all of
    torch's threads."""
    translator = Translator.from_file(model_file, TranslatorOptions(
        DecodeConfig(beam=beam, alpha=0.0, max_len_a=0, max_len_b=longest, guard=False),
        workers=1, batch_size=max(len(group) for group in groups), precision=precision))
    vocab = translator.vocab
    found, seconds = [], 0.0
    list(translator.translate_nbest(groups[0]))  # warm-up
    for group in groups:
        start = time.perf_counter()
        hyps = list(translator.translate_nbest(group))
        seconds += time.perf_counter() - start
        found += [[vocab.piece(token) for token in best[0].tokens] for best in hyps]
    return seconds, found


def run_ctranslate2(directory: Path, model_file: Path, groups: list[list[str]], beam: int,
                    longest: int, threads: int) -> tuple[float, list[list[str]]]:
    """(seconds, output pieces of each sentence) of CTranslate2 on our export."""
    vocab = load_for_inference(model_file).vocab
    translator = ctranslate2.Translator(str(directory), device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=threads)
    never = [[vocab.piece(vocab.pad_id)], [vocab.piece(vocab.bos_id)]]
    found, seconds = [], 0.0
    translator.translate_batch([vocab.pieces(line) for line in groups[0]], beam_size=beam,
                               max_decoding_length=longest)  # warm-up
    for group in groups:
        pieces = [vocab.pieces(line) for line in group]
        start = time.perf_counter()
        results = translator.translate_batch(pieces, beam_size=beam, length_penalty=0.0,
                                             max_decoding_length=longest,
                                             suppress_sequences=never)
        seconds += time.perf_counter() - start
        found += [result.hypotheses[0] for result in results]
    return seconds, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wmt14", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--lone", type=int, default=12,
                        help="sentences decoded one at a time")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--precision", default="fp32",
                        help="our decoding's precision (transformers and CTranslate2 stay "
                        "in float32): fp32 compares like with like, auto is what "
                        "`nmt translate` picks on this CPU")
    parser.add_argument("--modes", default="batch,lone",
                        help="which of batch and lone to run")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    args.work.mkdir(parents=True, exist_ok=True)
    directory = make_model(args.wmt14, args.work)
    model_file = args.work / "imported.pt"
    if not model_file.exists():
        import_model("huggingface", directory, model_file)
    exported = args.work / "ct2"
    if not exported.exists():
        export_ctranslate2(model_file, exported)
    lines = list(read_lines(args.wmt14 / "newstest2014-deen-src.en.sgm"))
    lines = [line for line in lines if line.startswith("<seg")]
    lines = [line.split(">", 1)[1].rsplit("<", 1)[0] for line in lines][: args.sentences]
    cases = [("batch", beam, batches(lines, args.batch)) for beam in (4, 1)]
    cases += [("lone", beam, [[line] for line in lines[: args.lone]]) for beam in (4, 1)]
    cases = [case for case in cases if case[0] in args.modes.split(",")]
    for mode, beam, groups in cases:
        rounds = []
        for _ in range(args.repeats):
            reference, theirs = run_transformers(directory, groups, beam, args.max_len)
            ours_s, mine = run_ours(model_file, groups, beam, args.max_len, args.precision)
            ct2_s, ct2 = run_ctranslate2(exported, model_file, groups, beam, args.max_len,
                                         args.threads)
            tokens = sum(len(pieces) + 1 for pieces in theirs)
            rounds.append({"transformers_tok_s": tokens / reference,
                           "ours_tok_s": tokens / ours_s,
                           "ctranslate2_tok_s": tokens / ct2_s,
                           "ours_vs_transformers": reference / ours_s,
                           "ctranslate2_vs_ours": ours_s / ct2_s,
                           "same_as_transformers": sum(a == b for a, b in zip(mine, theirs))
                           / len(theirs),
                           "ctranslate2_same_as_ours": sum(a == b for a, b in zip(mine, ct2))
                           / len(mine)})
        median = {key: round(statistics.median(r[key] for r in rounds), 3) for key in rounds[0]}
        figure(mode=mode, beam=beam, precision=args.precision,
               sentences=sum(len(g) for g in groups),
               batch=len(groups[0]), threads=args.threads, max_len=args.max_len,
               median=median, rounds=rounds)


if __name__ == "__main__":
    main()
