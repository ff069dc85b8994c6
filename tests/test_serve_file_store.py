"""The store of translated files waiting for download (serve/file_store.py): files deleted
after their time, bounded in files and bytes, in all and for each client, with the wait
for room said; a store left by a killed server removed by the next, and nothing else;
clients keyed by address, and their file names made safe."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from serve_fixtures import Clock
from transformer_nmt.locks import LOCK_FILE
from transformer_nmt.serve.file_store import FileStore, StoreFull, client_key, safe_name


def test_the_store_deletes_files_after_their_time_and_refuses_when_full():
    store = FileStore(keep_s=0.05, max_files=2)
    first = store.put(b"one", "a.txt")
    store.put(b"two", "b.txt")
    with pytest.raises(StoreFull):
        store.put(b"three", "c.txt")
    time.sleep(0.1)
    store.remove_expired()
    assert len(store) == 0 and os.listdir(store.directory) == [LOCK_FILE]
    assert store.take(first) is None
    store.close()
    assert not Path(store.directory).exists()


def test_one_client_cannot_fill_the_store_and_a_refusal_says_when_room_comes():
    clock = Clock()
    store = FileStore(keep_s=1800, max_files=4, client_files=2, clock=clock)
    store.put(b"one", "a.txt", "192.0.2.1")
    clock.now += 300
    store.put(b"two", "b.txt", "192.0.2.1")
    with pytest.raises(StoreFull) as mine:
        store.put(b"three", "c.txt", "192.0.2.1")
    # Its first file expires 1800 s after it came, 300 s ago.
    assert mine.value.retry_after_s == 1500
    assert "2 translated files from your address" in str(mine.value)
    assert "download them or retry in 1500 s" in str(mine.value)
    store.put(b"four", "d.txt", "192.0.2.2")
    store.put(b"five", "e.txt", "192.0.2.3")
    with pytest.raises(StoreFull) as full:
        store.put(b"six", "f.txt", "192.0.2.4")
    assert full.value.retry_after_s == 1500 and "4 translated files wait" in str(full.value)
    clock.now += 1500
    store.put(b"six", "f.txt", "192.0.2.4")
    store.close()


def test_the_store_is_bounded_in_bytes_in_all_and_for_each_client():
    clock = Clock()
    store = FileStore(keep_s=100, max_bytes=25, client_bytes=10, clock=clock)
    store.put(b"x" * 20, "big.txt", "a")  # one file is kept, however large
    with pytest.raises(StoreFull) as mine:
        store.put(b"x", "a.txt", "a")
    assert "of 20 bytes from your address" in str(mine.value)
    assert mine.value.retry_after_s == 100
    clock.now += 40
    store.put(b"x" * 5, "b.txt", "b")
    clock.now += 20
    with pytest.raises(StoreFull) as full:  # 20 + 5 + 8 > 25 until the first expires
        store.put(b"x" * 8, "c.txt", "c")
    assert full.value.retry_after_s == 40 and "(this one has 8)" in str(full.value)
    store.close()


KEEP_A_STORE = """
import time
from transformer_nmt.serve.file_store import FileStore
store = FileStore()
store.put(b"translated", "a.txt")
print(store.directory, flush=True)
time.sleep(600)
"""
"""A process that opens a file store, keeps a file in it and waits to be killed."""


def test_a_store_left_by_a_killed_server_is_removed_by_the_next_and_nothing_else(
        tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with subprocess.Popen([sys.executable, "-c", KEEP_A_STORE], stdout=subprocess.PIPE,
                          text=True, env={**os.environ, "TMPDIR": str(tmp_path)}) as killed:
        left = Path(killed.stdout.readline().strip())
        killed.kill()
    assert left.parent == tmp_path and left.is_dir()  # SIGKILL: nothing cleaned up
    alive = FileStore()
    being_made = tmp_path / "nmt-serve-files-new"  # its lock not taken yet
    being_made.mkdir()
    (being_made / LOCK_FILE).touch()
    (tmp_path / "other").mkdir()
    (tmp_path / "nmt-serve-files-link").symlink_to(left)
    store = FileStore()
    assert not left.exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([
        Path(alive.directory).name, Path(store.directory).name, being_made.name, "other",
        "nmt-serve-files-link"])
    store.close()
    alive.close()


@pytest.mark.parametrize("host, key", [
    ("192.0.2.7", "192.0.2.7"), ("::ffff:192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"), ("testclient", "testclient"), (None, ""),
])
def test_a_client_is_its_ipv4_address_or_its_ipv6_network(host, key):
    assert client_key(host) == key


@pytest.mark.parametrize("name, kind, safe", [
    ("../../etc/passwd.txt", "txt", "passwd.txt"),
    ("C:\\Users\\me\\Ünïcode name.DOCX", "docx", "n_code_name.docx"),
    (".hidden.md", "md", "hidden.md"),
    (None, "odt", "document.odt"),
    ("file.html", "html", "file.html"),
    ("a\"b;c.txt", "txt", "a_b_c.txt"),
])
def test_client_names_are_sanitised(name, kind, safe):
    assert safe_name(name, kind) == safe
