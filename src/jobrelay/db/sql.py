"""Load the SQL files that live next to the part that runs them.

Each statement is one file, `<part>/queries/<function_name>.sql`, read once and cached. The
text is typed `LiteralString` so psycopg accepts it as a query; SQL is never assembled from
runtime strings.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import LiteralString


@functools.cache
def load_query(package: str, name: str) -> LiteralString:
    """Return the text of `queries/<name>.sql` inside `package` (e.g. `jobrelay.jobs`)."""
    text = resources.files(package).joinpath("queries", f"{name}.sql").read_text("utf-8")
    # The file is part of the package, not input: declaring it literal is what lets psycopg's
    # typing tell it apart from strings built at run time.
    return text  # mypy treats LiteralString as str; pyright checks it


class Queries:
    """Attribute access to one part's query files: `Queries("jobrelay.jobs").claim_jobs`."""

    def __init__(self, package: str) -> None:
        self._package = package

    def __getattr__(self, name: str) -> LiteralString:
        if name.startswith("_"):
            raise AttributeError(name)
        return load_query(self._package, name)
