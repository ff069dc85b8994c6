"""fairseq's Dictionary files (dict.LANG.txt): its four specials, then one piece per line
with its count, in id order; the source's and the target's found in a checkpoint's data
directory.
"""

from __future__ import annotations

from pathlib import Path

from transformer_nmt.errors import UserError

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""A fairseq Dictionary's first four entries, ids 0 to 3, which dict.txt does not list."""


def read_dictionary(path: Path) -> list[str]:
    """pieces[id] of a fairseq Dictionary file: its four specials, then one entry per line
    ("piece count", or "piece count #fairseq:overwrite"), in id order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error})") from None
    pieces = list(SPECIALS)
    for number, line in enumerate(lines, 1):
        fields = line.rstrip().split(" ")
        if fields[-1] == "#fairseq:overwrite":
            fields = fields[:-1]
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise UserError(f"{path}, line {number}: {line!r} is not 'piece count'")
        pieces.append(fields[0])
    if len(set(pieces)) != len(pieces):
        repeated = next(piece for piece in pieces if pieces.count(piece) > 1)
        raise UserError(f"{path}: {repeated!r} is listed twice, which one sentencepiece "
                        "model cannot hold")
    return pieces


def dictionaries(dict_dir: Path, languages: tuple[str | None, str | None]
                  ) -> tuple[list[str], list[str]]:
    """The source's and the target's dictionaries: dict.SRC.txt and dict.TGT.txt where the
    checkpoint names the languages, else the one dict.*.txt in `dict_dir` (or several,
    all equal: a joined dictionary)."""
    if all(languages):
        paths = [dict_dir / f"dict.{language}.txt" for language in languages]
        missing = [path for path in paths if not path.is_file()]
        if missing:
            raise UserError(f"{missing[0]}: no such file; give the --dict-dir of the "
                            "checkpoint's data (fairseq-preprocess's --destdir)")
    else:
        paths = sorted(dict_dir.glob("dict.*.txt"))
        if not paths:
            raise UserError(f"{dict_dir}: no dict.*.txt; give the --dict-dir of the "
                            "checkpoint's data (fairseq-preprocess's --destdir)")
    dictionaries = [read_dictionary(path) for path in paths]
    if all(languages):
        return dictionaries[0], dictionaries[1]
    if len(paths) == 2 and dictionaries[0] != dictionaries[1]:
        raise UserError(f"{paths[1]} differs from {paths[0]}, and the checkpoint does not "
                        "say which is the source's: give --src-lang and --tgt-lang")
    for path, pieces in zip(paths[1:], dictionaries[1:]):
        if pieces != dictionaries[0]:
            raise UserError(f"{path} differs from {paths[0]}, and the checkpoint does not say "
                            "which language is the source; give a --dict-dir with one "
                            "dictionary, or the checkpoint of a translation task")
    return dictionaries[0], dictionaries[0]
