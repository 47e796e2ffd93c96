"""No request can stall chatcodec serve (issue 37, "The server"): a slow setup runs off the
event loop and within ``timeout``, a body that trickles in is cut at ``body_timeout``, and a
client that leaves mid-body is one log line. The app runs on loopback in front of the real
engine stand-in (tests/_standin.py); a request is slowed by a real Codec whose ``prepare``
waits for the test's word, so the tests assert orders and statuses, never durations."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from chatcodec import Codec  # noqa: E402
from chatcodec.serve import RemoteEngine, ServeConfig, create_app  # noqa: E402

from ._standin import ServerThread, StandIn  # noqa: E402

MODEL = "tiny"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Hi."}]}
SOURCE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
WAIT = 30.0  # the longest any step may wait for another (never reached when all is well)


class HeldCodec(Codec):
    """A real Codec whose ``prepare``, once ``hold`` is set, says it started and waits for
    ``go`` (the test's word) before it renders: a request whose setup is slow."""

    def __init__(self) -> None:
        super().__init__(SOURCE)
        self.hold = False
        self.started = threading.Event()
        self.go = threading.Event()
        self.released: list[bool] = []  # per held setup: whether `go` came before WAIT

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        if self.hold:
            self.started.set()
            self.released.append(self.go.wait(WAIT))
        return super().prepare(*args, **kwargs)


@pytest.fixture(scope="module")
def standin() -> Iterator[str]:
    engine = StandIn(seed=5)
    engine.reply = "Hello."
    with ServerThread(engine.app) as thread:
        yield thread.url + "/v1"


@contextmanager
def served(codec: Codec, url: str, **config: Any) -> Iterator[str]:
    """The app for ``codec`` in front of the stand-in at ``url``, on loopback; its root."""
    app = create_app(codec, RemoteEngine(url), ServeConfig(MODEL, **config))
    with ServerThread(app) as thread:
        yield thread.url


def test_a_slow_setup_leaves_the_server_answering(standin: str) -> None:
    """While one request's setup is held, /health and another request are answered (the
    setup runs on a worker thread); then the held request completes."""
    codec = HeldCodec()
    with served(codec, standin) as root:
        codec.hold = True
        held: list[Any] = []
        client = threading.Thread(
            target=lambda: held.append(
                httpx.post(root + "/v1/chat/completions", json=BODY, timeout=WAIT * 2)
            )
        )
        client.start()
        assert codec.started.wait(WAIT)
        # the held setup is waiting on its thread: the event loop answers meanwhile
        assert httpx.get(root + "/health", timeout=WAIT * 2).json() == {"status": "ok"}
        assert httpx.get(root + "/v1/models", timeout=WAIT * 2).status_code == 200
        codec.go.set()
        client.join()
    assert codec.released == [True]  # /health was answered before the setup was let go
    assert held[0].status_code == 200
    assert held[0].json()["choices"][0]["message"]["content"] == "Hello."


def test_a_setup_longer_than_the_timeout_is_a_504(standin: str) -> None:
    codec = HeldCodec()
    with served(codec, standin, timeout=0.2) as root:
        codec.hold = True
        try:
            response = httpx.post(root + "/v1/chat/completions", json=BODY, timeout=WAIT)
            # answered while the setup was still held
            assert codec.started.is_set() and not codec.go.is_set()
        finally:
            codec.go.set()  # the held thread ends, unheard
        assert response.status_code == 504, response.text
        error = response.json()["error"]
        assert error["type"] == "timeout_error"
        assert error["message"] == "setting the request up took more than 0.2 s"
        # the server goes on: the next request's setup is not held
        codec.hold = False
        assert httpx.post(root + "/v1/chat/completions", json=BODY, timeout=WAIT).status_code == 200


def head(root: str, length: int) -> bytes:
    """The request line and headers of a chat completion whose body is ``length`` bytes."""
    host = root.removeprefix("http://")
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def connect(root: str) -> socket.socket:
    host, port = root.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT)


def test_a_body_that_trickles_in_is_cut_by_a_408_and_its_connection_closed(standin: str) -> None:
    """A client sends the headers, then one byte of the body every 20 ms (it would take 8 s
    to finish): past ``body_timeout`` it is answered 408 and its connection is closed,
    though it was still sending."""
    body = b'{"model": "tiny", "messages": []}'.ljust(400)
    with served(Codec(SOURCE), standin, body_timeout=0.3) as root, connect(root) as sock:
        sock.sendall(head(root, len(body)))
        sock.settimeout(0.02)
        answer = b""
        sent = 0
        while not answer:
            # the body is never finished: the loop ends with the server's answer
            assert sent < len(body), "the whole trickled body was read: no read timeout"
            try:
                sock.sendall(body[sent : sent + 1])
                sent += 1
                answer = sock.recv(65536)
            except TimeoutError:
                continue
        sock.settimeout(WAIT)
        while chunk := sock.recv(65536):  # the server closes the connection: recv gives b""
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in answer.lower()
    assert b'"the request body did not arrive within 0.3 s"' in answer


def test_a_body_past_max_body_is_a_413_and_its_connection_closed(standin: str) -> None:
    """Refused by its length before it is read: the rest of it cannot be sent into the
    connection as a next request."""
    with served(Codec(SOURCE), standin, max_body=1000) as root, connect(root) as sock:
        sock.sendall(head(root, 10**6) + b'{"model": ')
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection: recv gives b""
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in answer.lower()


def test_a_body_within_the_timeout_is_read(standin: str) -> None:
    with served(Codec(SOURCE), standin, body_timeout=WAIT) as root, connect(root) as sock:
        body = b'{"model": "tiny", "messages": [{"role": "user", "content": "Hi."}]}'
        sock.sendall(head(root, len(body)) + body[:10])
        sock.sendall(body[10:])
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_a_client_that_leaves_mid_body_is_one_log_line(
    standin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Clients that send part of the body and close: one info line each, no traceback, in
    chatcodec's log or uvicorn's (which does not propagate to the root logger)."""
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="chatcodec.serve")
    try:
        with served(Codec(SOURCE), standin) as root:
            for _ in range(3):
                with connect(root) as sock:
                    sock.sendall(head(root, 1000) + b'{"model": "ti')
            # (the server is up: a request after them is answered, and the three were logged)
            assert httpx.get(root + "/health", timeout=WAIT).status_code == 200
            left = threading.Event()
            for _ in range(int(WAIT * 100)):
                if sum("went away" in r.getMessage() for r in caplog.records) >= 3:
                    left.set()
                    break
                threading.Event().wait(0.01)
            assert left.is_set(), [r.getMessage() for r in caplog.records]
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    gone = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(gone) == 3
    assert all(r.levelno == logging.INFO and r.name == "chatcodec.serve" for r in gone)
    assert "before sending the whole request body" in gone[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
