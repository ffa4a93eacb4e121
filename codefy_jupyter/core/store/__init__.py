"""The run database: SQLite (WAL) with one writer connection on its own thread (group commit),
the queries, the schema's migrations, the lock that keeps it to one server, and the workers'
tables."""
