"""Translate psycopg errors on known constraints into the domain's errors.

Callers above `db` only ever see `jobrelay.domain.errors`; the constraint names below are
the ones the migrations create.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from jobrelay.domain.errors import Conflict, JobrelayError, NotFound


class DatabaseUnavailable(JobrelayError):
    """PostgreSQL cannot be reached or refused the connection."""


class PoolerMismatch(JobrelayError):
    """DATABASE_URL does not behave like the connection pooler the settings declare."""


# constraint name -> (error class, message) for violations a caller can cause.
_CONSTRAINT_ERRORS: dict[str, tuple[type[JobrelayError], str]] = {
    "jobs_active_dedupe_key": (Conflict, "an active job with this dedupe key already exists"),
    "jobs_running_source_key": (Conflict, "another job of this source is running"),
    "project_organization_id_fkey": (NotFound, "organization not found"),
    "organization_member_organization_id_fkey": (NotFound, "organization not found"),
    "organization_member_pkey": (Conflict, "already a member of this organization"),
}


def translate(exc: psycopg.Error) -> JobrelayError | None:
    """The domain error for `exc`, or None when it is not a known, caller-caused violation."""
    if isinstance(exc, pg_errors.IntegrityError):
        constraint = exc.diag.constraint_name or ""
        known = _CONSTRAINT_ERRORS.get(constraint)
        if known is not None:
            error_class, message = known
            return error_class(message)
    return None


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise known constraint violations inside the block as domain errors."""
    try:
        yield
    except psycopg.Error as exc:
        domain_error = translate(exc)
        if domain_error is None:
            raise
        raise domain_error from exc


def describe_dsn(dsn: str) -> str:
    """`host:port/dbname` (or the socket directory) of a DSN, without credentials."""
    if "://" not in dsn:  # libpq's key=value form; it may hold password=...
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error:
            return "<unparseable DATABASE_URL>"
        port = f":{params['port']}" if params.get("port") else ""
        return f"{params.get('host') or 'localhost'}{port}/{params.get('dbname') or ''}"
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or parse_qs(parts.query).get("host", ["localhost"])[0]
        port = f":{parts.port}" if parts.port else ""
        return f"{host}{port}{parts.path or '/'}"
    except ValueError:
        return "<unparseable DATABASE_URL>"
