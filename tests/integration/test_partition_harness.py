"""The partition harness drops packets of one port, both ways, and only of that port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.partition import Blackhole, TcpRelay, unavailable


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(1024):
            conn.sendall(data)


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(1024)


def test_a_cut_port_stops_answering_and_heals(echo_port: int) -> None:
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    with TcpRelay(("127.0.0.1", echo_port)) as relay, TcpRelay(("127.0.0.1", echo_port)) as other:
        cut = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        spared = socket.create_connection(("127.0.0.1", other.port), timeout=5)
        assert _roundtrip(cut, b"before") == b"before"
        hole = Blackhole(relay.port)
        with hole.cut_for():
            cut.settimeout(0.5)
            cut.sendall(b"during")
            with pytest.raises(TimeoutError):
                cut.recv(1024)  # no RST, no FIN: silence
            with pytest.raises(OSError):  # new connections time out too
                socket.create_connection(("127.0.0.1", relay.port), timeout=0.5)
            assert _roundtrip(spared, b"other port") == b"other port"
        assert not hole.is_cut
        cut.settimeout(10)  # TCP retransmits what was dropped once the path is back
        assert cut.recv(1024) == b"during"
        assert _roundtrip(cut, b"after") == b"after"
        cut.close()
        spared.close()
