"""Random and adversarial bytes through `nmt prepare`, `translate` and `evaluate`.

Whatever the input (invalid UTF-8, NUL bytes, encoded lone surrogates, huge lines, empty
files, gzip whole or truncated), each command must end with status 0, 1 or 2 — never a
traceback, which here would be an exception escaping `main` — and must leave what was
already written as it was: the inputs, a finished output from before, and no output
file or finished data directory that claims to be complete when the command failed.
"""

import gzip

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from transformer_nmt.cli import main
from transformer_nmt.data.manifest import MANIFEST
from transformer_nmt.data.text import count_lines

from train_fixtures import WORDS

FUZZ = settings(max_examples=8, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)
weird_line = st.one_of(
    sentence,
    st.text(max_size=40),
    st.just("\x00\x00"),
    st.just("\ufeffbom at the start"),
    st.sampled_from(["a\u2028b", "tab\tin\tline", "\r\n", "   "]),
)


def _encode(lines: list[str]) -> bytes:
    # surrogatepass writes lone surrogates as the (invalid) bytes a broken encoder would.
    return "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass")


def _gzip(data: bytes, truncate: bool) -> bytes:
    packed = gzip.compress(data)
    return packed[: max(len(packed) // 2, 1)] if truncate else packed


file_bytes = st.one_of(
    st.binary(max_size=200),
    st.lists(weird_line, max_size=12).map(_encode),
    st.tuples(st.lists(sentence, min_size=1, max_size=12).map(_encode), st.booleans())
      .map(lambda pair: _gzip(*pair)),
)

HUGE_LINE = _encode([" ".join(["house"] * 50_000)])


def run_without_traceback(args: list[str]) -> int:
    code = main(args)
    assert code in (0, 1, 2), (args, code)
    return code


@FUZZ
@given(src=file_bytes, tgt=file_bytes)
@example(src=HUGE_LINE, tgt=HUGE_LINE)
@example(src=b"", tgt=b"")
@example(src=b"\n\n\n", tgt=b"  \n\n\n")
def test_prepare_answers_any_bytes_without_a_traceback(tmp_path_factory, src, tgt):
    root = tmp_path_factory.mktemp("prepare")
    (root / "train.src").write_bytes(src)
    (root / "train.tgt").write_bytes(tgt)
    out = root / "data"
    code = run_without_traceback(
        ["prepare", "--corpus", "files", "--src", "en", "--tgt", "de", "--out", str(out),
         "--train-src", str(root / "train.src"), "--train-tgt", str(root / "train.tgt"),
         "--vocab-size", "40", "--threads", "1"])
    assert (root / "train.src").read_bytes() == src and (root / "train.tgt").read_bytes() == tgt
    assert (out / MANIFEST).exists() == (code == 0)


@FUZZ
@given(text=file_bytes)
@example(text=HUGE_LINE)
@example(text=b"")
def test_translate_answers_any_bytes_without_a_traceback(tmp_path_factory, tiny_model_file, text):
    root = tmp_path_factory.mktemp("translate")
    source, output = root / "in.txt", root / "out.txt"
    source.write_bytes(text)
    output.write_text("an earlier translation\n", encoding="utf-8")
    code = run_without_traceback(["translate", "--model", str(tiny_model_file), "--input",
                                  str(source), "--output", str(output), "--beam", "2",
                                  "--max-len-b", "3", "--workers", "1"])
    assert source.read_bytes() == text
    if code != 0:
        assert output.read_text(encoding="utf-8") == "an earlier translation\n"
    else:
        assert output.read_bytes().count(b"\n") == count_lines(source)


@FUZZ
@given(hyp=file_bytes, ref=file_bytes)
def test_evaluate_answers_any_bytes_without_a_traceback(tmp_path_factory, hyp, ref):
    root = tmp_path_factory.mktemp("evaluate")
    (root / "hyp").write_bytes(hyp)
    (root / "ref").write_bytes(ref)
    (root / "scores.json").write_text("{}", encoding="utf-8")
    code = run_without_traceback(["evaluate", "--hyp", str(root / "hyp"), "--ref",
                                  str(root / "ref"), "--tgt-lang", "de",
                                  "--json", str(root / "scores.json")])
    if code != 0:
        assert (root / "scores.json").read_text(encoding="utf-8") == "{}"
