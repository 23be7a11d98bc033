"""Alembic environment: runs the SQL versions on the connection `jobrelay.db.migrate` opened.

This module never reads settings or URLs itself; the caller passes a SQLAlchemy connection
in `config.attributes["connection"]`, and the whole run is one transaction.
"""

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise SystemExit("run migrations with `jobrelay migrate`")

context.configure(connection=connection, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
