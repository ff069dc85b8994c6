"""The shared BPE vocabulary of both languages, learned and applied with sentencepiece.

The special ids are fixed, because the model and the decoder rely on them:
pad 0, unk 1, bos 2 (<s>), eos 3 (</s>).

A multilingual model (an imported OPUS-MT one-to-many model) chooses its output language
by a token at the start of the source, such as >>fra<<: the vocabulary holds each as a
piece of its own (a user-defined piece), and a source that starts with one is encoded as
that token followed by the rest of the sentence, as Marian's own tokenizer does.

A model with separate source and target vocabularies (an imported one: OPUS-MT's with two
id maps, fairseq's with two dictionaries) has one id space that joins both, and two
sentencepiece models over those same pieces: the source's, which never produces a piece
only the target side has, and the target's (`Vocab.target`), which encodes target text
(fine-tuning data, references to score, forced prefixes). Either decodes any id.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from transformer_nmt.data.prepare_options import DEFAULT_SAMPLE_SENTENCES
from transformer_nmt.data.vocab_proto import read_declaration
from transformer_nmt.errors import UserError

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

LANGUAGE_TOKEN = re.compile(r">>[^<>\s]+<<")
"""A target-language token of a multilingual model, such as >>fra<<."""
_LEADING_LANGUAGE_TOKEN = re.compile(r"\s*(>>[^<>\s]+<<)\s*")


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_character_coverage(vocab_size: int) -> float:
    """1.0 (every character seen gets a piece) below 16000 pieces; 0.9995 from there on,
    where corpora are large web crawls whose thousands of stray characters (emoji, CJK in
    English text) would otherwise each take a vocabulary slot."""
    return 1.0 if vocab_size < 16000 else 0.9995


class Vocab:
    """A sentencepiece model with the fixed special ids; encodes text to ids and back.

    Every vocabulary is read through `from_bytes` (or `load`, which calls it), which
    refuses one that is not complete: see `check_vocabulary`."""

    def __init__(self, processor: spm.SentencePieceProcessor,
                 target: "Vocab | None" = None) -> None:
        self.processor = processor
        self.target: Vocab = self if target is None else target
        """The vocabulary that encodes target text: this one, unless the model's target
        side has a sentencepiece model of its own over the same ids."""
        self.threads = available_cores()
        # A language token is a piece that sentencepiece keeps whole (a user-defined one).
        pieces = processor.id_to_piece(list(range(processor.get_piece_size())))
        self.language_tokens = {
            piece: i for i, piece in enumerate(pieces)
            if piece.startswith(">>") and LANGUAGE_TOKEN.fullmatch(piece)
            and i in processor.encode(piece)}
        """The target-language tokens of a multilingual model and their ids (else none)."""

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """Load a sentencepiece model file (a data directory's spm.model)."""
        path = Path(path)
        if not path.is_file():
            raise UserError(f"{path}: no such vocabulary file")
        return cls.from_bytes(path.read_bytes(), str(path))

    @classmethod
    def from_bytes(cls, model: bytes, source: str = "embedded vocabulary",
                   target: bytes | None = None) -> "Vocab":
        """Load a serialized model proto, as `to_bytes` returns and checkpoints embed, and
        the target side's (`target_bytes`) where it has one; a one-line UserError naming
        `source` unless each is a complete vocabulary and both hold the same pieces."""
        processor = _processor(model, source)
        if target is None:
            return cls(processor)
        target_processor = _processor(target, f"{source} (target side)")
        if (processor.id_to_piece(list(range(processor.get_piece_size())))
                != target_processor.id_to_piece(
                    list(range(target_processor.get_piece_size())))):
            raise UserError(f"{source}: its source and target sentencepiece models do not "
                            "hold the same pieces at the same ids; import the model again")
        return cls(processor, cls(target_processor))

    def to_bytes(self) -> bytes:
        """The serialized model proto of the source side (of both, when shared)."""
        return self.processor.serialized_model_proto()

    def target_bytes(self) -> bytes | None:
        """The target side's serialized model proto, or None when both sides share one."""
        return None if self.target is self else self.target.to_bytes()

    def __len__(self) -> int:
        return self.processor.get_piece_size()

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def encode(self, text: str) -> list[int]:
        """Token ids of one sentence, without BOS or EOS."""
        return self.encode_batch([text], threads=1)[0]

    def encode_batch(self, texts: Sequence[str], threads: int | None = None) -> list[list[int]]:
        """Token ids of many sentences, encoded by sentencepiece's thread pool
        (`threads`, default every available core); a leading target-language token of a
        multilingual vocabulary is one id before the rest's."""
        threads = threads or self.threads
        if not self.language_tokens:
            return self.processor.encode(list(texts), num_threads=threads)
        split = [self._split_language(text) for text in texts]
        rests = self.processor.encode([rest for _, rest in split], num_threads=threads)
        return [language + ids for (language, _), ids in zip(split, rests)]

    def _split_language(self, text: str) -> tuple[list[int], str]:
        """([the id of `text`'s leading language token] or [], the rest of `text`); a
        UserError for a language token this vocabulary does not have."""
        match = _LEADING_LANGUAGE_TOKEN.match(text)
        if match is None:
            return [], text
        token = match.group(1)
        if token not in self.language_tokens:
            known = ", ".join(sorted(self.language_tokens)[:12])
            raise UserError(f"the model has no target-language token {token}; it has "
                            f"{known}{', ...' if len(self.language_tokens) > 12 else ''}")
        return [self.language_tokens[token]], text[match.end():]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of a sequence of ids; pad, bos and eos are skipped wherever they are."""
        return self.processor.decode([int(i) for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of one sentence, as strings (▁ marks a word start)."""
        return [self.piece(i) for i in self.encode(text)]

    def piece(self, token_id: int) -> str:
        """The subword piece of one id (▁ marks a word start)."""
        return self.processor.id_to_piece(int(token_id))

    def score(self, token_id: int) -> float:
        """The piece's score in the sentencepiece model (its log-probability or merge rank)."""
        return self.processor.get_score(int(token_id))

    def marked_pieces(self, ids: Iterable[int]) -> list[str]:
        """The pieces of `ids` with ▁ where a word starts, as data/words.py reads them:
        sentencepiece's own pieces."""
        return [self.piece(i) for i in ids]


def _processor(model: bytes, source: str) -> spm.SentencePieceProcessor:
    """The sentencepiece processor of a serialized model proto, checked usable."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, TypeError) as error:
        raise UserError(f"{source}: not a sentencepiece model: {error}") from None
    check_vocabulary(model, processor, source)
    return processor


def check_vocabulary(model: bytes, processor: spm.SentencePieceProcessor, source: str) -> None:
    """UserError naming `source` unless the sentencepiece model `model` (loaded into
    `processor`) is one transformer-nmt can use: complete (its trainer and normalizer
    specifications present, as many pieces as it was trained for, which a file cut short
    after some of its pieces is not) and with its special pieces at the fixed ids."""
    remedy = "copy the file again, or make the vocabulary with `nmt prepare`"
    try:
        declared = read_declaration(model)
    except ValueError as error:
        raise UserError(f"{source}: damaged sentencepiece model ({error}); {remedy}") from None
    missing = [name for name, present in (("trainer_spec", declared.has_trainer_spec),
                                          ("normalizer_spec", declared.has_normalizer_spec))
               if not present]
    if missing:
        raise UserError(f"{source}: incomplete sentencepiece model: it ends after "
                        f"{declared.pieces} pieces, without its {' and '.join(missing)} (the "
                        f"file was cut short); {remedy}")
    short = declared.pieces < declared.vocab_size and declared.hard_vocab_limit
    if short or declared.pieces > declared.vocab_size:
        raise UserError(f"{source}: damaged sentencepiece model: it holds {declared.pieces} "
                        f"pieces but was trained for {declared.vocab_size}; {remedy}")
    specials = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if specials != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise UserError(
            f"{source}: pad/unk/bos/eos ids are {specials}, transformer-nmt needs "
            f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; make the vocabulary with `nmt prepare`"
        )


_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _round_down(value: int) -> int:
    """`value` rounded down to two significant digits, a friendlier suggestion."""
    scale = 10 ** max(len(str(value)) - 2, 0)
    return max(value // scale * scale, 1)


def train_vocab(inputs: Sequence[str | Path], model_prefix: str | Path, vocab_size: int, *,
                character_coverage: float | None = None,
                sample_sentences: int = DEFAULT_SAMPLE_SENTENCES,
                seed: int = 1, threads: int | None = None) -> Vocab:
    """Learn a shared BPE model from text files (one sentence per line) and write
    `{model_prefix}.model` and `{model_prefix}.vocab`.

    sentencepiece samples `sample_sentences` lines uniformly (reservoir sampling) from
    all inputs together, so memory is bounded whatever the corpus size. Lines longer
    than 4192 bytes are skipped for learning only. A size the corpus cannot support is a
    UserError that suggests one it can.
    """
    if vocab_size < 8:
        raise UserError(f"vocab_size must be at least 8, not {vocab_size}")
    coverage = default_character_coverage(vocab_size) if character_coverage is None \
        else character_coverage
    if not 0.9 <= coverage <= 1.0:
        raise UserError(f"character_coverage must be between 0.9 and 1.0, not {coverage}")
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            input=[str(path) for path in inputs],
            model_prefix=str(model_prefix),
            vocab_size=vocab_size,
            model_type="bpe",
            character_coverage=coverage,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            input_sentence_size=sample_sentences,
            shuffle_input_sentence=True,
            num_threads=threads or available_cores(),
            minloglevel=2,
        )
    except RuntimeError as error:
        message = str(error)
        if "sentences_.empty()" in message:
            raise UserError("the training text has no non-blank lines to learn a vocabulary "
                            "from; check that the train files hold sentences") from None
        if match := _TOO_HIGH.search(message):
            most = int(match.group(2))
            raise UserError(
                f"vocab_size={vocab_size} is larger than this corpus can support (at most "
                f"{most} pieces); use vocab_size={_round_down(most)} or smaller"
            ) from None
        if match := _TOO_LOW.search(message):
            needed = int(match.group(2))
            raise UserError(
                f"vocab_size={vocab_size} is smaller than the {needed} pieces this corpus "
                f"needs for its characters and the special tokens; use vocab_size="
                f"{max(2 * needed, 100)} or more, or a lower character_coverage"
            ) from None
        raise UserError(f"sentencepiece could not learn the vocabulary: {message}") from None
    return Vocab.load(f"{model_prefix}.model")
