"""Network partitions for tests: packets really dropped on loopback, not connections closed.

A partition is a peer that silently stops answering: no RST, no FIN, packets lost. The
kernel's own tools make one: `Blackhole(port)` adds a classic-BPF `cls_bpf` filter in
direct-action mode at the ingress of `lo` (under a `clsact` qdisc) that drops every IPv4/TCP
packet whose source or destination port is `port`, both directions of every connection to
that port. Each cut is its own filter (priority = the port), so concurrent tests cutting
different ports never touch each other's filters; the shared `clsact` qdisc is left in place.

A server the whole session shares (the test PostgreSQL) must never be cut: put a `TcpRelay`
of the test's own in front of it and cut the relay's port. The client's connections then
cross a black-holed port exactly as they would cross a dead network; the relay's own
connection to the server stays up, as a server behind a partition would.

Needs root and `tc` (iproute2); `unavailable()` says why not, for `pytest.skip`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from psycopg.conninfo import conninfo_to_dict, make_conninfo

# Classic BPF, offsets relative to the network header (SKF_NET_OFF), so the program does not
# depend on where the device puts skb->data. Returns TC_ACT_SHOT (2) to drop, TC_ACT_UNSPEC
# (-1) to let the packet go on.
_SKF_NET_OFF = 0xFFF00000


def _program(port: int) -> str:
    net = _SKF_NET_OFF
    instructions = [
        (0x30, 0, 0, net + 0),  # ldb [net+0]: version and header length
        (0x74, 0, 0, 4),  # rsh #4: the version
        (0x15, 0, 8, 4),  # jeq #4 (IPv4) else pass
        (0x30, 0, 0, net + 9),  # ldb [net+9]: protocol
        (0x15, 0, 6, 6),  # jeq #6 (TCP) else pass
        (0xB1, 0, 0, net + 0),  # ldxb 4*([net+0]&0xf): IP header length
        (0x48, 0, 0, net + 0),  # ldh [x+net+0]: source port
        (0x15, 2, 0, port),  # jeq port: drop
        (0x48, 0, 0, net + 2),  # ldh [x+net+2]: destination port
        (0x15, 0, 1, port),  # jeq port: drop, else pass
        (0x06, 0, 0, 2),  # ret TC_ACT_SHOT
        (0x06, 0, 0, 0xFFFFFFFF),  # ret TC_ACT_UNSPEC
    ]
    body = ",".join(f"{code} {jt} {jf} {k}" for code, jt, jf, k in instructions)
    return f"{len(instructions)},{body}"


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=check, timeout=10)


def _filter_args(port: int) -> list[str]:
    where = ["dev", "lo", "ingress", "pref", str(port)]
    return ["filter", "add", *where, "bpf", "da", "bytecode", _program(port)]


_probe_lock = threading.Lock()
_probe_result: list[str | None] = []


def unavailable() -> str | None:
    """None when this process can black-hole loopback ports, else the reason it cannot."""
    with _probe_lock:
        if not _probe_result:
            _probe_result.append(_probe())
        return _probe_result[0]


def _probe() -> str | None:
    if shutil.which("tc") is None:
        return "`tc` (iproute2) is not installed"
    if os.geteuid() != 0:
        return "dropping packets with tc needs root"
    added = _tc("qdisc", "add", "dev", "lo", "clsact", check=False)
    if (
        added.returncode != 0
        and "xclusivity" not in added.stderr
        and "File exists" not in (added.stderr)
    ):
        return f"tc cannot add a clsact qdisc on lo: {added.stderr.strip()}"
    probe_port = 9  # discard: nothing listens there in tests
    filter_ = _tc(*_filter_args(probe_port), check=False)
    if filter_.returncode != 0:
        return f"tc cannot add a cls_bpf filter on lo: {filter_.stderr.strip()}"
    _tc("filter", "del", "dev", "lo", "ingress", "pref", str(probe_port), check=False)
    return None


@dataclass
class Blackhole:
    """Drop every TCP packet to or from `port` on loopback while cut (`cut()` / `heal()`,
    or `with blackhole.cut_for():`)."""

    port: int
    is_cut: bool = field(default=False, init=False)

    def cut(self) -> None:
        if self.is_cut:
            return
        reason = unavailable()
        if reason is not None:
            raise RuntimeError(f"cannot cut port {self.port}: {reason}")
        _tc(*_filter_args(self.port))
        self.is_cut = True

    def heal(self) -> None:
        if not self.is_cut:
            return
        _tc("filter", "del", "dev", "lo", "ingress", "pref", str(self.port))
        self.is_cut = False

    @contextmanager
    def cut_for(self) -> Iterator[None]:
        self.cut()
        try:
            yield
        finally:
            self.heal()


class TcpRelay:
    """Forward 127.0.0.1:`port` (a free one) to `target`, byte for byte, one thread pair per
    connection. `target` is (host, port) or the path of a Unix socket. Cut its port with
    `Blackhole(relay.port)`."""

    def __init__(self, target: tuple[str, int] | str) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="tcp-relay", daemon=True)

    def __enter__(self) -> TcpRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                _close_quietly(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = _connect(self._target)
            except OSError:
                _close_quietly(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()


def postgres_relay(dsn: str) -> tuple[TcpRelay, str]:
    """A relay to the server of `dsn` (TCP or Unix socket) and the DSN that goes through it."""
    params = conninfo_to_dict(dsn)
    host = str(params.get("host") or "127.0.0.1")
    port = int(params.get("port") or 5432)
    target: tuple[str, int] | str = (
        f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
    )
    relay = TcpRelay(target)
    return relay, make_conninfo(dsn, host="127.0.0.1", port=relay.port)


def _connect(target: tuple[str, int] | str) -> socket.socket:
    if isinstance(target, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(target)
    else:
        sock = socket.create_connection(target, timeout=5)
    sock.settimeout(None)
    return sock


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        _close_quietly(source)
        _close_quietly(sink)


def _close_quietly(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.close()
