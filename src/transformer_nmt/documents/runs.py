"""A paragraph's translation shared out among its runs: the paragraph (every run's text
joined) is translated as one text, in context, and each target word goes back to the run
of the source word it is aligned with, so that "the **big** house" keeps its bold on the
word that translates "big".

Target words follow their order in the translation: a run whose words the translation
moves elsewhere takes the neighbours' formatting rather than reordering the sentence. With
no alignment (a translator without one, a withheld sentence) the words are shared out in
proportion to each run's share of the source's characters. When neither is possible (a
translation of one word, as in a language written without spaces) the whole translation
takes the first run's formatting and the other runs are emptied: the text is never lost,
only formatting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

_WORD = re.compile(r"\S+\s*")
_LETTER = re.compile(r"[^\W\d_]")


class Aligned(Protocol):
    """What a translator gives back for one text (transformer_nmt.decode.text.job.Translation has it)."""

    text: str
    alignment: list[tuple[int, int]] | None


Result = Aligned | str
"""A translation with its word alignment, or a bare text."""
Translate = Callable[[list[str]], Sequence[Result]]
"""Texts in, one translation per text out, in order."""


@dataclass
class Run:
    """One piece of a paragraph's text with its own formatting, read and written through
    the document's own objects."""

    get: Callable[[], str]
    set: Callable[[str], None]


def spaced(run: Run) -> Run:
    """`run` read as ending in a space (a tab, line break or line end follows it, which
    parts words without a space character); its translation's trailing spaces go."""
    return Run(lambda: run.get() + " ", lambda text: run.set(text.rstrip()))


def needs_translation(text: str) -> bool:
    """Whether `text` has a letter: numbers, punctuation and whitespace stay as they are."""
    return _LETTER.search(text) is not None


def pending(paragraphs: list[list[Run]]) -> list[list[Run]]:
    """The paragraphs that have letters to translate."""
    return [runs for runs in paragraphs if needs_translation(source_text(runs))]


def source_text(runs: list[Run]) -> str:
    """What a paragraph's translator gets: its runs' text joined, stripped."""
    return "".join(run.get() for run in runs).strip()


def put_back(runs: list[Run], result: Result) -> None:
    """The paragraph's translation written into its runs (see `distribute`)."""
    texts = distribute([run.get() for run in runs], result)
    for run, text in zip(runs, texts):
        if text != run.get():
            run.set(text)


def translate_paragraphs(paragraphs: list[list[Run]], translate: Translate) -> None:
    """Every paragraph with letters translated as one text and put back into its runs."""
    wanted = pending(paragraphs)
    results = list(translate([source_text(runs) for runs in wanted])) if wanted else []
    if len(results) != len(wanted):
        raise ValueError(f"the translator gave {len(results)} results for {len(wanted)} "
                         "texts")
    for runs, result in zip(wanted, results):
        put_back(runs, result)


def distribute(run_texts: list[str], result: Result) -> list[str]:
    """The translation `result` of the runs' joined (stripped) text, shared out among the
    runs: one new text per run. The whitespace before the first word and after the last
    stays where it was; whitespace-only runs between words are emptied (the words carry
    their own spaces)."""
    text = result if isinstance(result, str) else result.text
    alignment = None if isinstance(result, str) else result.alignment
    owners = [index for index, piece in enumerate(run_texts) if piece.strip()]
    if not owners:
        return list(run_texts)
    target_words = _WORD.findall(text.strip())
    if len(owners) == 1 or len(target_words) < 2:
        targets = [owners[0]] * len(target_words)
    elif alignment:
        targets = _monotone(_by_alignment(alignment, _source_word_runs(run_texts),
                                          len(target_words)))
    else:
        targets = _by_proportion(run_texts, owners, len(target_words))
    first, last = owners[0], owners[-1]
    out = [piece if index < first or index > last else ""
           for index, piece in enumerate(run_texts)]
    for word, run in zip(target_words, targets):
        out[run] += word
    _spaces_where_they_were(run_texts, out)
    out[first] = _space_before(run_texts[first]) + out[first]
    out[last] += _space_after(run_texts[last])
    return out


def _spaces_where_they_were(run_texts: list[str], out: list[str]) -> None:
    """The space between two runs' words moved to the start of the second where the
    source had it there ("the **big** house": no underlined or bold space)."""
    filled = [index for index, text in enumerate(out) if text.strip()]
    for index, following in zip(filled, filled[1:]):
        space = _space_after(out[index])
        if space and not _space_after(run_texts[index]):
            out[index] = out[index].rstrip()
            out[following] = space + out[following]


def _space_before(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _space_after(text: str) -> str:
    return text[len(text.rstrip()):]


def _monotone(runs: list[int]) -> list[int]:
    """Runs in document order along the translation: a word aligned back to an earlier run
    stays in the run before it, so that no word changes place."""
    highest = -1
    return [highest := max(highest, run) for run in runs]


def _source_word_runs(run_texts: list[str]) -> list[int]:
    """The run holding the first character of each whitespace-separated source word."""
    owner_of_char = [index for index, piece in enumerate(run_texts) for _ in piece]
    return [owner_of_char[match.start()] for match in re.finditer(r"\S+", "".join(run_texts))]


def _by_alignment(alignment: list[tuple[int, int]], source_runs: list[int],
                  count: int) -> list[int]:
    """The run of each target word: that of the first source word it is aligned with;
    an unaligned word goes with the word before it (the first with the word after)."""
    found: dict[int, int] = {}
    for source, target in sorted(alignment):
        if 0 <= target < count and target not in found and source_runs:
            found[target] = source_runs[min(source, len(source_runs) - 1)]
    if not found:
        return [source_runs[0] if source_runs else 0] * count
    runs, current = [], found[min(found)]
    for index in range(count):
        current = found.get(index, current)
        runs.append(current)
    return runs


def _by_proportion(run_texts: list[str], owners: list[int], count: int) -> list[int]:
    """The run of each target word when the source's characters are shared out: word i
    goes to the run where the share i/count of the source's characters falls."""
    sizes = [len(run_texts[index].strip()) or 1 for index in owners]
    total = sum(sizes)
    bounds, running = [], 0
    for size in sizes:
        running += size
        bounds.append(running / total)
    runs = []
    for index in range(count):
        middle = (index + 0.5) / count
        runs.append(owners[next(k for k, bound in enumerate(bounds) if middle <= bound)])
    return runs
