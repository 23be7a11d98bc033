"""PostgreSQL adapter: pool, transactions, embedded server, SQL loader, error translation."""
