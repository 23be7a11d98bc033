"""The local SQS/S3 emulator: moto's server (`jobrelay.aws.moto_server`) in a child process
on a loopback port."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field


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
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmulatorError(f"the emulator exited with code {self.process.returncode}")
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
