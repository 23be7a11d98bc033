"""Chaos scenarios: real `jobrelay` processes killed, stopped and cut off from PostgreSQL,
then an invariant checker over the database and a client-side ledger. See bench/README.md."""
