"""Alembic environment and versions. Each version holds plain SQL; see `jobrelay.db.migrate`."""
