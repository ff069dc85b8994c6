"""POST /translate_file and GET /download_file as LibreTranslate has them (serve/files_api.py):
a multipart upload translated through the server's batcher, a download URL given once, the
file deleted after its download; refusals in LibreTranslate's shape. (The store of the
files itself: tests/test_serve_file_store.py.)"""

from __future__ import annotations

import functools
from pathlib import Path
from urllib.parse import urlparse

import pytest
from fastapi.testclient import TestClient

from document_fixtures import docx_structure, make_docx, with_member
from serve_fixtures import Clock, make_app
from transformer_nmt.serve.file_store import FileStore

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def client(served_model):
    with TestClient(make_app(served_model, max_characters=2000, max_sentences=20)) as client:
        yield client


def upload(client, name: str, content: bytes, **fields):
    return client.post("/translate_file", files={"file": (name, content)},
                       data={"source": "en", "target": "de", **fields})


def test_a_word_document_is_translated_downloaded_once_and_deleted(client, tmp_path):
    pytest.importorskip("docx")
    source = make_docx(tmp_path / "report.docx")
    answer = upload(client, "../../etc/My Report.docx", source.read_bytes())
    assert answer.status_code == 200, answer.text
    url = urlparse(answer.json()["translatedFileUrl"])
    assert url.scheme == "http" and url.path.startswith("/download_file/")
    assert url.path.endswith("-My_Report.docx")
    store = client.app.state.file_store
    download_id = url.path.split("/")[-1].split("-")[0]
    assert (Path(store.directory) / download_id).is_file()  # no client name on disk
    download = client.get(url.path)
    assert download.status_code == 200
    assert download.headers["content-disposition"] == 'attachment; filename="My_Report.docx"'
    translated = tmp_path / "translated.docx"
    translated.write_bytes(download.content)
    assert docx_structure(translated).shape == docx_structure(source).shape
    assert not (Path(store.directory) / download_id).exists()  # deleted once given
    again = client.get(url.path)
    assert again.status_code == 404 and "downloaded already" in again.json()["error"]


def test_text_files_and_sentences_over_the_servers_chunk_limits(client):
    text = "\n\n".join(f"the cat sleeps on a warm roof . the dog runs {i} ." for i in range(30))
    answer = upload(client, "notes.txt", text.encode())
    assert answer.status_code == 200, answer.text
    translated = client.get(urlparse(answer.json()["translatedFileUrl"]).path).text
    assert translated.count("\n\n") == 29


@pytest.mark.parametrize("name, content, fields, status, says", [
    ("scan.pdf", b"%PDF-1.7", {}, 400, "PDF is not supported"),
    ("notes.docx", b"plain words", {}, 400, "the name says .docx"),
    ("a.txt", b"hello", {"target": "fr"}, 400, "fr is not supported as target"),
    ("a.txt", b"hello", {"source": ""}, 400, "missing source parameter"),
])
def test_refusals_are_one_line_errors(client, name, content, fields, status, says):
    answer = upload(client, name, content, **fields)
    assert answer.status_code == status and says in answer.json()["error"]


@pytest.mark.parametrize("member", ["../../evil.txt", "/x/abs.txt", "word/document.xml"])
def test_a_package_with_a_member_outside_it_or_named_twice_is_422_naming_it(
        client, tmp_path, member):
    pytest.importorskip("docx")
    data = with_member(make_docx(tmp_path / "report.docx"), member)
    directory = Path(client.app.state.file_store.directory)
    stored = sorted(directory.iterdir())
    answer = upload(client, "report.docx", data)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error.startswith("report.docx: refused: ") and repr(member) in error
    assert "\n" not in error and sorted(directory.iterdir()) == stored  # nothing written


def test_a_form_without_a_file_or_not_multipart(client):
    answer = client.post("/translate_file", data={"source": "en", "target": "de"})
    assert answer.status_code == 400 and "send the file as multipart" in answer.json()["error"]
    answer = client.post("/translate_file", files={"other": ("a.txt", b"x")},
                         data={"source": "en", "target": "de"})
    assert answer.status_code == 400 and "missing file parameter" in answer.json()["error"]


def test_a_file_over_the_size_limit_is_413(client, monkeypatch):
    from transformer_nmt.serve import files_api
    monkeypatch.setattr(files_api, "FILE_LIMITS", files_api.FileLimits(max_bytes=10))
    answer = upload(client, "a.txt", b"hello there world")
    assert answer.status_code == 413 and "more than the limit of 10" in answer.json()["error"]


def test_the_api_key_is_required_in_a_header_or_the_form(served_model):
    with TestClient(make_app(served_model, api_key=KEY)) as client:
        assert upload(client, "a.txt", b"hello").status_code == 401
        assert upload(client, "a.txt", b"hello", api_key="wrong").status_code == 403
        assert upload(client, "a.txt", b"hello", api_key=KEY).status_code == 200
        assert client.post("/translate_file", files={"file": ("a.txt", b"hello")},
                           data={"source": "en", "target": "de"},
                           headers={"X-API-Key": KEY}).status_code == 200


def test_unknown_ids_and_names_that_are_not_the_files_own_are_404(client):
    answer = upload(client, "a.txt", b"the dog runs")
    path = urlparse(answer.json()["translatedFileUrl"]).path
    assert client.get(path.replace("-a.txt", "-b.txt")).status_code == 404
    assert client.get("/download_file/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get(path).status_code == 200


def test_a_client_s_full_share_is_429_with_retry_after_and_others_are_served(
        served_model, monkeypatch):
    from transformer_nmt.serve import app as app_module
    monkeypatch.setattr(app_module, "FileStore", functools.partial(
        FileStore, client_files=1, clock=Clock()))
    with TestClient(client_from_header(make_app(served_model))) as client:
        def upload_from(host: str, name: str):
            return client.post("/translate_file", files={"file": (name, b"the dog runs")},
                               data={"source": "en", "target": "de"},
                               headers={"X-Client": host})

        assert upload_from("192.0.2.1", "a.txt").status_code == 200
        refused = upload_from("192.0.2.1", "b.txt")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1800"
        assert "from your address" in refused.json()["error"]
        assert "retry in 1800 s" in refused.json()["error"]
        assert upload_from("2001:db8::2", "c.txt").status_code == 200


def client_from_header(app):
    """`app` with each request's client address taken from its X-Client header: clients
    at several addresses through one TestClient."""
    async def from_header(scope, receive, send):
        host = dict(scope.get("headers", ())).get(b"x-client")
        if host:
            scope = {**scope, "client": (host.decode(), 50000)}
        await app(scope, receive, send)
    return from_header


def test_files_may_be_larger_than_a_translate_requests_body(client):
    numbers = b"42\n" * 100_000  # 300 kB: over /translate's body limit, nothing to translate
    assert client.post("/translate", content=numbers,
                       headers={"Content-Type": "application/json"}).status_code == 413
    answer = upload(client, "numbers.txt", numbers)
    assert answer.status_code == 200, answer.text
    assert client.get(urlparse(answer.json()["translatedFileUrl"]).path).content == numbers
