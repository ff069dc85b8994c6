"""The `wmt14-en-de` recipe: the paper's WMT14 English-German, in either direction.

Train is Europarl v7, Common Crawl and News Commentary v9 (4.5M pairs), valid is
newstest2013 and test newstest2014, all from statmt.org's archives. A mirror directory
(the mirror option or NMT_WMT14_MIRROR) may hold the archives or the files extracted from them.
"""

from __future__ import annotations

import re
import tarfile
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

from transformer_nmt.data.corpora.base import Corpus, Pairs, SourceOptions, check_languages
from transformer_nmt.data.corpora.fetch import Remote, fetch, mirror_dir
from transformer_nmt.data.text import iter_lines, normalize, read_lines, zip_parallel
from transformer_nmt.errors import UserError

WMT14_URL = "https://www.statmt.org/"
# Training text: (file name inside the archive without the language, archive path).
WMT14_TRAIN = (
    ("europarl-v7.de-en", "europarl/v7/de-en.tgz"),
    ("commoncrawl.de-en", "wmt13/training-parallel-commoncrawl.tgz"),
    ("news-commentary-v9.de-en", "wmt14/training-parallel-nc-v9.tgz"),
)
WMT14_VALID = ("newstest2013", "wmt14/dev.tgz")
WMT14_TEST = ("newstest2014-deen", "wmt14/test-full.tgz")
WMT14 = Remote(
    url=WMT14_URL, env="NMT_WMT14_MIRROR", cache_name="wmt14",
    hint="set mirror (or NMT_WMT14_MIRROR) to a directory or URL holding the WMT14 files "
         "or archives")

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
    """Line-aligned training and newstest2013 text; newstest2014 from its SGML, whose
    segment ids are checked to pair up."""

    name = "wmt14-en-de"
    description = ("the paper's WMT14 English-German: Europarl v7 + Common Crawl + News "
                   "Commentary v9 (4.5M pairs), newstest2013 valid, newstest2014 test; "
                   "either direction; mirror or NMT_WMT14_MIRROR for a local copy")

    def __init__(self, src: str, tgt: str, options: SourceOptions) -> None:
        super().__init__(src, tgt, options)
        check_languages(self.name, src, tgt, ["en", "de"])

    def identity(self) -> dict:
        """The names of the training corpora and of the two test sets."""
        return {"train": [name for name, _ in WMT14_TRAIN], "valid": WMT14_VALID[0],
                "test": WMT14_TEST[0]}

    def _open(self, stack: ExitStack, names: list[str], archive: str) -> tuple[Iterator[str], str]:
        """Lines of the first of `names` found, and a label for messages: a plain file in
        a local mirror (at its top level or one folder down, as the archive holds it),
        else a member of the archive (from the mirror, or downloaded into the cache)."""
        root = mirror_dir(self.options, WMT14)
        if root is not None:
            for name in names:
                for path in [root / name, *root.glob(f"*/{name}")]:
                    if path.is_file():
                        return read_lines(path, self.options.errors), str(path)
        # A mirror may keep the archive at its statmt.org path or flat at its top level.
        tgz = fetch(self.options, WMT14, archive, also=[Path(archive).name],
                    missing=lambda mirror: (
                        f"wmt14-en-de: {mirror} holds neither {names[0]} nor "
                        f"{Path(archive).name}; download {WMT14_URL}{archive} into it"))
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
        """(source, target) segments of `split`; train is the three corpora in turn."""
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
