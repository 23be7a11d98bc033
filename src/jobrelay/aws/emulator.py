"""The local SQS/S3 emulator: moto's server (`jobrelay.aws.moto_server`) in a child process
on a loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO


class EmulatorError(RuntimeError):
    """The emulator could not start; the message names the cause."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@dataclass
class LocalEmulator:
    """moto's server process; `start()` returns its endpoint URL."""

    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # The last stderr line, read while the process runs: what a failed start says.
    _stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=1), repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> str:
        if self.port == 0:
            self.port = free_port(self.host)
        elif not port_is_free(self.host, self.port):
            raise EmulatorError(
                f"port {self.port} on {self.host} is already in use; "
                "set JOBRELAY_EMULATOR_PORT to another port (0 picks a free one)"
            )
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobrelay.aws.moto_server",
                "-H",
                self.host,
                "-p",
                str(self.port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert self.process.stderr is not None  # stderr=PIPE
        # Drained for the whole life of the process (moto logs every request there), so the
        # pipe never fills; only the last line is kept.
        drain = threading.Thread(
            target=_keep_last_line, args=(self.process.stderr, self._stderr_tail), daemon=True
        )
        drain.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                drain.join(timeout=5)  # the pipe is at its end once the process exited
                said = f": {self._stderr_tail[-1]}" if self._stderr_tail else ""
                code = self.process.returncode
                raise EmulatorError(f"the emulator exited with code {code}{said}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self.endpoint_url
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise EmulatorError(f"the emulator did not listen on {self.endpoint_url} in {timeout_s}s")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def _keep_last_line(stream: IO[bytes], tail: deque[str]) -> None:
    with stream:
        for raw in stream:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                tail.append(line)
