"""`nmt serve` as a real process (serve/server.py): LibreTranslate's own
client works unchanged, SIGTERM loses no accepted request, clients that stall are cut off
and the work of those that leave is dropped."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import pytest
from libretranslatepy import LibreTranslateAPI

from decode_fixtures import make_model_file
from serve_fixtures import running_server, with_languages

KEY = "k3y-for-tests"
POST = b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
"""The start of a request sent by hand, on a raw socket."""


def post_json(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_libretranslate_client_translates_unchanged_with_a_key_from_the_environment(
        served_model):
    with running_server(served_model, "--log-level", "info",
                        env={"NMT_API_KEY": KEY}) as (url, process):
        client = LibreTranslateAPI(url, api_key=KEY)
        assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                      {"code": "de", "name": "German", "targets": []}]
        text = "the dog runs in the green garden"
        status, ours = post_json(url + "/v1/translate", {"text": text}, {"X-API-Key": KEY})
        assert status == 200
        assert client.translate(text, "en", "de") == ours["translations"][0]["text"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            LibreTranslateAPI(url, api_key="wrong").translate(text, "en", "de")
        assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as unsupported:
            client.translate(text, "fr", "de")
        assert unsupported.value.code == 400
        assert_keys_in_urls_stay_out_of_the_log(url, process)


def assert_keys_in_urls_stay_out_of_the_log(url: str, process: subprocess.Popen) -> None:
    """LibreTranslate's clients may send api_key in the query string, which uvicorn's
    access log wrote in clear: the right key and a wrong one go there, then the server
    stops and nothing it wrote holds either."""
    wrong = "wr0ng-k3y-in-the-url"
    for key, status in ((KEY, 200), (wrong, 403)):
        request = urllib.request.Request(
            f"{url}/translate?api_key={key}&q=the+dog&source=en&target=de", data=b"")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answered, body = response.status, response.read()
        except urllib.error.HTTPError as error:
            answered, body = error.code, error.read()
        assert answered == status and key.encode() not in body
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=30)
    log = (stdout + stderr).decode()
    assert log.count("/translate?api_key=***&q=the+dog&source=en&target=de") == 2, log
    assert KEY not in log and wrong not in log


def test_sigterm_answers_every_accepted_request_then_exits_0(served_model):
    # While the slot decodes, sentences wait up to 3 s for company: the signal comes while
    # some are queued and others decode, all of them accepted.
    with running_server(served_model, "--max-wait-ms", "3000", "--engine", "torch") as (
            url, process):
        texts = [f"the dog runs . the cat sleeps number {i} ." for i in range(8)]
        with ThreadPoolExecutor(len(texts)) as pool:
            answers = [pool.submit(post_json, url + "/v1/translate", {"text": text})
                       for text in texts]
            wait_for_accepted(url, 2 * len(texts))
            process.send_signal(signal.SIGTERM)
            results = [answer.result() for answer in answers]
        assert [status for status, _ in results] == [200] * len(texts)
        assert all(len(body["translations"][0]["sentences"]) == 2 for _, body in results)
        assert process.wait(timeout=30) == 0


def metric(url: str, name: str) -> float:
    """The value of sample `name` (with its labels) in the server's /metrics; 0 if absent."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def wait_for_queued(url: str, sentences: int, seconds: float = 30) -> None:
    """Until /metrics shows `sentences` sentences waiting to be decoded or decoding."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if metric(url, "nmt_queue_sentences") >= sentences:
            return
        time.sleep(0.05)
    raise AssertionError(f"{sentences} sentences never waited in the queue")


def wait_for_accepted(url: str, sentences: int, seconds: float = 30) -> None:
    """Until /metrics shows `sentences` sentences waiting, decoding or decoded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (metric(url, "nmt_queue_sentences")
                + metric(url, "nmt_batch_sentences_sum")) >= sentences:
            return
        time.sleep(0.05)
    raise AssertionError(f"{sentences} sentences were never accepted")


def test_clients_that_go_away_stop_their_batch_and_their_sentences_leave_the_queue(
        tmp_path):
    """The first client's sentence decodes at once, for thousands of steps (a minimum
    length near the model's positions); the others' wait for company behind it, for ten
    minutes. When the clients leave, their queued sentences leave the queue, and the
    batch decoding stops at its next step."""
    (tmp_path / "model").mkdir()
    model = with_languages(make_model_file(tmp_path / "model", max_positions=20000), tmp_path)
    with running_server(model, "--engine", "torch", "--min-len", "19000", "--max-len-b",
                        "19000", "--max-wait-ms", "600000", "--timeout", "600") as (url, _):
        host, port = url.removeprefix("http://").split(":")
        first = json.dumps({"text": "the dog runs ."}).encode()
        body = json.dumps({"text": "the dog runs . the cat sleeps .",
                           "glossary": {"dog": "garden"}}).encode()
        clients = [socket.create_connection((host, int(port))) for _ in range(3)]
        clients[0].sendall(POST + b"Content-Length: %d\r\n\r\n" % len(first) + first)
        wait_for_queued(url, 1)
        for client in clients[1:]:
            client.sendall(POST + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_for_queued(url, 1 + 2 * 2)
        for client in clients:
            client.close()
        deadline = time.monotonic() + 60  # generous: they leave at once
        while metric(url, "nmt_queue_sentences") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        # The decoding sentence counts until its batch returns: it stopped.
        assert metric(url, "nmt_queue_sentences") == 0
        gone = 'nmt_requests_total{route="/v1/translate",status="499"}'
        while metric(url, gone) < len(clients) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert metric(url, gone) == len(clients)
        assert metric(url, "nmt_batch_sentences_count") == 0  # nothing decoded to its end


def nmt_serve(*arguments: str) -> subprocess.CompletedProcess:
    """`nmt serve` with these arguments, run to its end."""
    return subprocess.run([sys.executable, "-m", "transformer_nmt.cli", "serve", *arguments],
                          capture_output=True, text=True, timeout=120)


def test_a_busy_port_is_one_line_naming_the_address_before_any_startup(served_model):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = nmt_serve("--model", str(served_model), "--port", str(port))
    assert result.returncode == 2
    assert result.stderr.startswith(f"nmt serve: error: cannot listen on 127.0.0.1:{port}: "
                                    "address already in use")
    assert result.stderr.count("\n") == 1 and "choose another --port" in result.stderr


def test_a_host_that_does_not_resolve_is_one_line_naming_it(served_model):
    result = nmt_serve("--model", str(served_model), "--host", "no-such-host.invalid")
    assert result.returncode == 2
    assert result.stderr.startswith("nmt serve: error: cannot listen on "
                                    "no-such-host.invalid:8080: cannot resolve host "
                                    "'no-such-host.invalid'")
    assert result.stderr.count("\n") == 1 and "--host" in result.stderr


DEADLINE_S = 1.0
SLACK_S = 3.0
"""How much later than its deadline a stalled connection may close on a loaded machine."""


@pytest.fixture(scope="module")
def deadline_server(served_model):
    with running_server(served_model, "--headers-timeout", str(DEADLINE_S), "--body-timeout",
                        str(DEADLINE_S), "--keep-alive", str(DEADLINE_S)) as (url, _):
        yield url


def stall(url: str, sent: bytes, dribble: bytes) -> tuple[float, bytes]:
    """(seconds until the server closed, what it answered) of a connection that sends
    `sent`, then `dribble` every 0.1 s, while another client gets a translation."""
    host, port = url.removeprefix("http://").split(":")
    received = b""
    with ThreadPoolExecutor(1) as pool, socket.create_connection((host, int(port))) as sock:
        started = time.monotonic()
        other = pool.submit(post_json, url + "/v1/translate", {"text": "the dog runs"})
        sock.sendall(sent)
        sock.settimeout(0.1)
        while time.monotonic() - started < DEADLINE_S + SLACK_S:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                try:
                    sock.sendall(dribble)
                except OSError:  # the server closed as we sent: read what it said
                    pass
                continue
            except ConnectionResetError:  # our dribble crossed the server's close
                break
            if not chunk:
                break
            received += chunk
        closed_after = time.monotonic() - started
        assert other.result()[0] == 200
    return closed_after, received



@pytest.mark.parametrize("sent, dribble, answer", [
    (b"", b"", b""),  # connected, never sends a byte
    (b"P", b"O", b""),  # headers one byte at a time
    (POST + b"Content-Length: 100\r\n\r\n" + b'{"text": "a', b"", b"408"),  # body too short
    (POST + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\na\r\n", b"408"),  # never ends
    (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", b"", b"200"),  # idle after an answer
], ids=["idle", "slow-headers", "short-body", "endless-chunked-body", "keep-alive"])
def test_a_stalled_connection_is_closed_at_its_deadline_while_others_are_answered(
        deadline_server, sent, dribble, answer):
    seconds, received = stall(deadline_server, sent, dribble)
    assert DEADLINE_S * 0.9 <= seconds < DEADLINE_S + SLACK_S, (seconds, received)
    assert received.startswith(b"HTTP/1.1 " + answer) if answer else received == b""
    if answer == b"408":
        assert b"body_timeout_s (1 s)" in received and b"connection: close" in received


def test_many_stalled_connections_are_all_closed_and_the_server_answers_meanwhile(
        deadline_server):
    host, port = deadline_server.removeprefix("http://").split(":")
    sockets = [socket.create_connection((host, int(port))) for _ in range(50)]
    try:
        for sock in sockets:
            sock.sendall(b"GET / HTTP/1.1\r\n")
        status, _ = post_json(deadline_server + "/v1/translate", {"text": "the cat sleeps"})
        assert status == 200
        time.sleep(DEADLINE_S)
        for sock in sockets:
            sock.settimeout(SLACK_S)
            assert sock.recv(1024) == b""
    finally:
        for sock in sockets:
            sock.close()


class RecordingLoop:
    """What an event loop's exception handler uses of it, recorded."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Callable, tuple]] = []
        self.default: list[dict] = []

    def call_later(self, delay: float, callback: Callable, *args) -> None:
        self.timers.append((delay, callback, args))

    def default_exception_handler(self, context: dict) -> None:
        self.default.append(context)

    def fire(self) -> None:
        """Run the timers set so far, as if their delay had passed."""
        timers, self.timers = self.timers, []
        for _, callback, args in timers:
            callback(*args)


def accept_failure(number: int) -> dict:
    """The context asyncio gives its exception handler when accept() fails with `number`."""
    return {"message": "socket.accept() out of system resource",
            "exception": OSError(number, os.strerror(number)), "socket": None}


def test_accept_failures_are_logged_once_then_counted_once_per_interval(caplog):
    from transformer_nmt.serve.server import ACCEPT_FAILURES_INTERVAL_S, AcceptFailures

    loop, handler = RecordingLoop(), AcceptFailures()
    other = {"message": "Task exception was never retrieved", "exception": ValueError()}
    with caplog.at_level(logging.WARNING, logger="transformer_nmt.serve.server"):
        for _ in range(1000):
            handler(loop, accept_failure(errno.EMFILE))
        handler(loop, other)
        assert [record.getMessage() for record in caplog.records] == [
            "cannot accept new connections: Too many open files; they wait until open "
            "connections close (stalled ones at their deadlines); `ulimit -n` (now "
            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]}) raises the number of open "
            "files a server may hold"]
        assert loop.default == [other]
        assert [delay for delay, _, _ in loop.timers] == [ACCEPT_FAILURES_INTERVAL_S]
        caplog.clear()
        loop.fire()  # the interval ends: how many more, and another interval
        handler(loop, accept_failure(errno.EMFILE))
        loop.fire()  # one more, then a quiet interval ends the spell
        loop.fire()
        assert loop.timers == []
        handler(loop, accept_failure(errno.ENOMEM))  # a new spell is logged at once
    assert [record.getMessage() for record in caplog.records] == [
        "cannot accept new connections: Too many open files; 999 more failed tries in the "
        f"last {ACCEPT_FAILURES_INTERVAL_S:g} s",
        "cannot accept new connections: Too many open files; 1 more failed try in the "
        f"last {ACCEPT_FAILURES_INTERVAL_S:g} s",
        "cannot accept new connections: Cannot allocate memory; they wait until open "
        "connections close (stalled ones at their deadlines)"]


def test_out_of_file_descriptors_is_said_once_and_the_server_answers_as_deadlines_pass(
        served_model, tmp_path):
    """Connections beyond the server's `ulimit -n` wait in the kernel's queue: asyncio
    failed to accept them thousands of times a second, each failure a logged traceback;
    now one line says so, and they are answered as stalled connections reach their
    deadlines."""
    from transformer_nmt.serve.server import ACCEPT_FAILURES_INTERVAL_S

    log = tmp_path / "stderr"
    with running_server(served_model, "--headers-timeout", str(DEADLINE_S),
                        stderr=log, open_files=64) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        started = time.monotonic()
        stalled = [socket.create_connection((host, int(port))) for _ in range(100)]
        try:
            deadline = time.monotonic() + 60
            while "accept" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            status, _ = post_json(url + "/v1/translate", {"text": "the cat sleeps"})
            seconds = time.monotonic() - started
        finally:
            for sock in stalled:
                sock.close()
    said = [line for line in log.read_text().splitlines() if "accept" in line]
    assert status == 200
    assert said[0].startswith("nmt serve: warning: cannot accept new connections: Too many "
                              "open files;")
    # One line, then at most one per interval that passed.
    assert len(said) <= 2 + seconds / ACCEPT_FAILURES_INTERVAL_S, said[:3]


def cpu_seconds(pid: int) -> float:
    """The CPU time, user and system, that process `pid` has used, all its threads."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command's name
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_out_of_file_descriptors_the_server_idles_rather_than_retrying_accept(
        served_model, tmp_path):
    """While it has no descriptor left, a listening socket stays ready with connections
    queued: an event loop that tried accept() again at once would keep a CPU busy doing
    nothing. Held connections keep the server out of descriptors throughout (their
    headers' deadline is far off); closed, the server accepts again."""
    log = tmp_path / "stderr"
    with running_server(served_model, "--headers-timeout", "120",
                        stderr=log, open_files=64) as (url, process):
        host, port = url.removeprefix("http://").split(":")
        held = [socket.create_connection((host, int(port))) for _ in range(100)]
        try:
            deadline = time.monotonic() + 60
            while "accept" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "cannot accept new connections" in log.read_text()
            before = cpu_seconds(process.pid)
            time.sleep(2)
            # A resource bound, not a timing one: asyncio's round of 2048 failing accept()
            # calls a second takes a good part of a CPU; one call a second, next to none.
            assert cpu_seconds(process.pid) - before < 0.1
        finally:
            for sock in held:
                sock.close()
        status, _ = post_json(url + "/v1/translate", {"text": "the cat sleeps"})
        assert status == 200


class OutOfFiles(socket.socket):
    """A socket whose accept() fails as a process's does at its `ulimit -n`, counted."""

    calls = 0

    def accept(self):
        OutOfFiles.calls += 1
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def test_out_of_file_descriptors_each_round_of_accepting_ends_at_its_first_failure():
    """asyncio tried accept() up to the backlog's length each time the socket was ready,
    every try failing: a good part of a CPU spent on nothing while descriptors lacked. The
    next round (asyncio's, a second later) tries again."""
    import asyncio

    from transformer_nmt.serve.listen import ListeningSocket

    class Listening(ListeningSocket, OutOfFiles):  # ListeningSocket's super() fails
        pass

    reports = []

    async def two_rounds() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reports.append(context["exception"]))
        sock = Listening(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        server = await loop.create_server(asyncio.Protocol, sock=sock, backlog=100)
        client = socket.create_connection(sock.getsockname())  # the socket is ready
        try:
            while not reports:
                await asyncio.sleep(0.01)
            assert OutOfFiles.calls == len(reports) == 1
            await asyncio.sleep(0)  # the round is over
            with pytest.raises(OSError) as raised:
                sock.accept()
            assert raised.value.errno == errno.EMFILE and OutOfFiles.calls == 2
        finally:
            client.close()
            server.close()

    OutOfFiles.calls = 0
    asyncio.run(two_rounds())
    assert all(error.errno == errno.EMFILE for error in reports)


def test_the_server_runs_on_asyncio_s_loop_even_where_uvloop_is_installed(monkeypatch):
    """uvicorn's "auto" picks uvloop where it is installed, whose libuv closes the
    connections it cannot accept for want of descriptors at once, unreported; the server
    wants asyncio's, which leaves them queued and says so (the tests above)."""
    import asyncio
    import types

    from transformer_nmt.serve.server import DeadlineConfig

    uvloop = types.ModuleType("uvloop")
    uvloop.new_event_loop = lambda: None
    monkeypatch.setitem(sys.modules, "uvloop", uvloop)
    monkeypatch.delitem(sys.modules, "uvicorn.loops.uvloop", raising=False)
    config = DeadlineConfig(lambda scope, receive, send: None, headers_timeout_s=1.0)
    assert config.get_loop_factory() is asyncio.SelectorEventLoop


def exchange(url: str, sent: bytes) -> bytes:
    """All the server answers to `sent` on one connection, until it closes it."""
    host, port = url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(sent)
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_request_framed_by_both_length_and_chunks_is_refused_and_its_connection_closed(
        deadline_server):
    """RFC 9112, 6.1: a proxy that framed it by its Content-Length would read the rest of
    the chunked body as another request; nothing after it on the connection is answered."""
    body = b'{"q": "the dog runs", "source": "en", "target": "de"}'
    framed_twice = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                    b"application/json\r\nContent-Length: 5\r\nTransfer-Encoding: "
                    b"chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    received = exchange(deadline_server,
                        framed_twice + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 "), received
    assert b"connection: close" in received and received.count(b"HTTP/1.1 ") == 1
    assert b"both a Content-Length and a Transfer-Encoding" in received


def test_a_chunk_announced_larger_than_the_body_s_limit_is_refused_at_once(deadline_server):
    """As a Content-Length over the limit is: not with a 408 at the body's deadline. The
    connection closes at the headers' deadline, no next request coming."""
    announced = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{\"q\": ")
    received = exchange(deadline_server, announced)
    assert received.startswith(b"HTTP/1.1 413 "), received
    assert b"larger than the server's limit" in received


CHUNKED = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")
"""A request's headers announcing a chunked body."""


def test_the_installed_h11_says_what_is_left_of_a_chunk():
    import h11

    from transformer_nmt.serve.server import chunk_left

    conn = h11.Connection(h11.SERVER)
    conn.receive_data(CHUNKED + b"ffff\r\nab")
    while conn.next_event() is not h11.NEED_DATA:
        pass
    assert chunk_left(conn) == 0xffff - 2, (
        f"h11 {h11.__version__} no longer keeps what is left of a chunk as "
        "Connection._reader._bytes_in_chunk: the server now counts a chunked body's bytes "
        "as they arrive, and refuses a chunk announced over the body's limit only once "
        "that much came (or at the body's deadline); read the count where this h11 keeps "
        "it in serve/server.py's chunk_left")
    assert chunk_left(h11.Connection(h11.SERVER)) is None  # no body being read


@contextlib.contextmanager
def server_in_thread(app) -> Iterator[str]:
    """The base URL of `app` served in this process, on a thread, as `nmt serve` serves
    it (a 1 s deadline on headers); stopped afterwards."""
    import threading

    from transformer_nmt.serve.listen import listening_sockets
    from transformer_nmt.serve.server import DeadlineConfig, DrainingServer

    sockets = listening_sockets("127.0.0.1", 0)
    port = sockets[0].getsockname()[1]
    server = DrainingServer(DeadlineConfig(app, host="127.0.0.1", port=port,
                                           log_level="warning", headers_timeout_s=1.0), app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets})
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server stopped while starting"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        for sock in sockets:
            sock.close()


def test_without_h11_s_count_a_chunk_announced_over_the_limit_is_refused_as_it_arrives(
        monkeypatch, served_model):
    """The fallback of an h11 that no longer says what is left of a chunk: the body's
    limit counts the bytes received instead, and refuses once they pass it."""
    import transformer_nmt.serve.server as server

    from serve_fixtures import make_app

    consulted = []

    def says_nothing(conn) -> None:
        consulted.append(conn)

    monkeypatch.setattr(server, "chunk_left", says_nothing)
    app = make_app(served_model, max_characters=1)
    limit = 4 * 1 + 65536  # serve/app.py's body limit at max_characters=1
    with server_in_thread(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(CHUNKED + b"ffffffffffffffff\r\n" + b" " * (limit + 1))
            received = b""
            while b"\r\n\r\n" not in received and (chunk := sock.recv(65536)):
                received += chunk
    assert consulted
    assert received.startswith(b"HTTP/1.1 413 "), received
