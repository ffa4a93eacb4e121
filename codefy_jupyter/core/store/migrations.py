"""The store's schema, as numbered migration steps.

`PRAGMA user_version` holds how many steps a database file has applied. A step is a list of SQL
statements applied in one `BEGIN IMMEDIATE` transaction together with the new user_version, so a
crash mid-migration leaves the file at the previous version, never half-migrated. Steps are only
ever appended: a released step is never edited, because files in the field have already run it.

A file whose user_version is higher than the steps we know was written by a newer codefy-jupyter;
we refuse it rather than guess (`SchemaVersionError`), and write nothing to it.
"""

from __future__ import annotations

import sqlite3
from typing import Sequence

from .sweeps import SCHEMA as SWEEP_SCHEMA

Step = Sequence[str]


class Only(str):
    """A statement of a step for one backend only (`sqlite` or `postgresql`): where the two engines
    spell a thing differently (a trigger's body). Every other statement runs on both."""

    backend: str

    def __new__(cls, backend: str, sql: str) -> "Only":
        statement = super().__new__(cls, sql)
        statement.backend = backend
        return statement


def for_backend(statement: str, backend: str) -> bool:
    return getattr(statement, "backend", backend) == backend


_COUNT_ONE_MORE = ("INSERT INTO run_counts (status, n) VALUES (NEW.status, 1) "
                   "ON CONFLICT (status) DO UPDATE SET n = run_counts.n + 1")

SCHEMA_STEPS: list[Step] = [
    # 1: runs, their event log, metrics, artifacts, environment fingerprints.
    (
        # submit_order is assigned by the store (max + 1): "newest first" must not depend on clock
        # ties or on run-id spelling, and an implicit rowid may be renumbered by VACUUM.
        """
        CREATE TABLE runs (
            id                 TEXT PRIMARY KEY,
            submit_order       INTEGER NOT NULL UNIQUE,
            name               TEXT,
            status             TEXT NOT NULL,
            owner              TEXT,
            device             TEXT,
            devices            TEXT,      -- json list
            queue_key          TEXT,
            lane               TEXT,
            session            TEXT,
            seed               INTEGER,
            deterministic      INTEGER,   -- 0/1/NULL
            options            TEXT,      -- json object
            graph              TEXT,      -- json object
            submitted_at       REAL NOT NULL,
            started_at         REAL,
            finished_at        REAL,
            error              TEXT,      -- json object
            fingerprint_digest TEXT,
            worker_id          TEXT,
            last_seq           INTEGER NOT NULL DEFAULT 0  -- highest committed event seq
        )
        """,
        # The list view filters by status and pages newest first.
        "CREATE INDEX runs_status_order ON runs (status, submit_order)",
        # payload_bytes sits before payload so that sizing a page never reads payload overflow pages.
        # A rowid table rather than WITHOUT ROWID: payloads can be large (up to the payload cap).
        """
        CREATE TABLE run_events (
            run_id        TEXT NOT NULL,
            seq           INTEGER NOT NULL,
            type          TEXT NOT NULL,
            created_at    REAL NOT NULL,
            payload_bytes INTEGER NOT NULL,
            payload       TEXT NOT NULL,  -- json object
            PRIMARY KEY (run_id, seq)
        )
        """,
        """
        CREATE TABLE run_metrics (
            id         INTEGER PRIMARY KEY,
            run_id     TEXT NOT NULL,
            node_id    TEXT,
            name       TEXT NOT NULL,
            step       INTEGER,
            value      REAL,
            created_at REAL NOT NULL
        )
        """,
        # An index on run_id alone is ordered by (run_id, id): reads come back in write order.
        "CREATE INDEX run_metrics_run ON run_metrics (run_id)",
        """
        CREATE TABLE run_artifacts (
            id         INTEGER PRIMARY KEY,
            run_id     TEXT NOT NULL,
            node_id    TEXT,
            kind       TEXT NOT NULL,
            path       TEXT NOT NULL,
            meta       TEXT,              -- json object
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX run_artifacts_run ON run_artifacts (run_id)",
        """
        CREATE TABLE fingerprints (
            digest     TEXT PRIMARY KEY,
            document   TEXT NOT NULL,     -- json object
            created_at REAL NOT NULL
        )
        """,
    ),
    # 2: worker agents, their one-time enrollment tokens, and each run's execution facts (a worker
    # run's resume point lives there: execution_facts.worker_resume).
    (
        "ALTER TABLE runs ADD COLUMN execution_facts TEXT",  # json object
        # Only sha256 hashes of tokens are stored: a copy of the database lets nobody connect as a
        # worker. token_hash is NULL once revoked (the row stays: the name and its history remain).
        """
        CREATE TABLE workers (
            id           TEXT PRIMARY KEY,
            name         TEXT NOT NULL UNIQUE,
            token_hash   TEXT UNIQUE,
            enrolled_at  REAL NOT NULL,
            last_seen_at REAL,
            info         TEXT             -- json object: what its last hello reported
        )
        """,
        # worker_id: set for a re-issue (the token may only enroll that worker, and revokes its
        # old token); used_at/used_by once it was exchanged (single use).
        """
        CREATE TABLE worker_enrollments (
            token_hash TEXT PRIMARY KEY,
            worker_id  TEXT,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            created_by TEXT,
            used_at    REAL,
            used_by    TEXT
        )
        """,
    ),
    # 3: who enrolled each worker (on a shared server they may drain or remove it, besides admins).
    # NULL: enrolled by nobody in particular (the server's token, a single-user server), so only
    # admins manage it. Workers enrolled before this step take the creator of the fresh (not
    # re-issued) token that first enrolled their name, which is who enrolled the current row:
    # a name is enrolled afresh only while no row holds it.
    (
        "ALTER TABLE workers ADD COLUMN enrolled_by TEXT",
        """
        UPDATE workers SET enrolled_by = (
            SELECT e.created_by FROM worker_enrollments e
            WHERE e.used_by = workers.name AND e.worker_id IS NULL AND e.used_at IS NOT NULL
            ORDER BY e.used_at DESC LIMIT 1)
        """,
    ),
    # 4: a run's link to the sweep or study that submitted it. study_attempt_id is the stamp a
    # study writes on its attempt before submitting the child: after a crash between the two
    # writes, the study finds its child by it (partial indexes: most runs belong to neither).
    (
        "ALTER TABLE runs ADD COLUMN sweep_id TEXT",
        "ALTER TABLE runs ADD COLUMN sweep_variant INTEGER",
        "ALTER TABLE runs ADD COLUMN study_id TEXT",
        "ALTER TABLE runs ADD COLUMN study_attempt_id TEXT",
        "CREATE INDEX runs_sweep ON runs (sweep_id) WHERE sweep_id IS NOT NULL",
        "CREATE INDEX runs_study_attempt ON runs (study_attempt_id) WHERE study_attempt_id IS NOT NULL",
    ),
    # 5: sweeps and their variants (store/sweeps.py): a variant row keeps its child's harvested
    # result after retention or a delete removed the run.
    SWEEP_SCHEMA,
    # 6: studies, their variants, every attempt at a repetition, and each study's audit log
    # (core/store/studies.py). An attempt's run_id is chosen before its child is submitted: the
    # stamp the study relinks by after a crash between the submit and its record.
    (
        """
        CREATE TABLE studies (
            id              TEXT PRIMARY KEY,
            created_order   INTEGER NOT NULL UNIQUE,
            name            TEXT,
            owner           TEXT,
            status          TEXT NOT NULL,
            revision        INTEGER NOT NULL,
            request_digest  TEXT NOT NULL,     -- sha256 of the request, SECRET values blanked
            idempotency_key TEXT UNIQUE,
            objective       TEXT NOT NULL,     -- json {node_id, metric, direction}
            seed            INTEGER NOT NULL,
            repetitions     INTEGER NOT NULL,
            options         TEXT NOT NULL,     -- json object
            budget          TEXT NOT NULL,     -- json object
            resume_policy   TEXT NOT NULL,
            halt            TEXT,              -- json {budget, limit, used}
            error           TEXT,              -- json object
            last_cursor     INTEGER NOT NULL DEFAULT 0,
            created_at      REAL NOT NULL,
            updated_at      REAL NOT NULL
        )
        """,
        "CREATE INDEX studies_status_order ON studies (status, created_order)",
        """
        CREATE TABLE study_variants (
            study_id TEXT NOT NULL,
            variant  INTEGER NOT NULL,
            label    TEXT NOT NULL,
            graph    TEXT NOT NULL,            -- json, SECRET values blanked
            ops      TEXT,                     -- json list, or NULL for a whole-graph variant
            PRIMARY KEY (study_id, variant)
        )
        """,
        """
        CREATE TABLE study_attempts (
            id                 TEXT PRIMARY KEY,
            study_id           TEXT NOT NULL,
            variant            INTEGER NOT NULL,
            repetition         INTEGER NOT NULL,
            attempt            INTEGER NOT NULL,
            seed               INTEGER NOT NULL,
            run_id             TEXT NOT NULL,
            status             TEXT NOT NULL,
            error              TEXT,           -- json object
            created_at         REAL NOT NULL,
            submitted_at       REAL,
            started_at         REAL,
            finished_at        REAL,
            objective_value    REAL,
            final_metrics      TEXT,           -- json object
            fingerprint_digest TEXT,
            stop_reason        TEXT,
            evidence_copied    INTEGER NOT NULL DEFAULT 0,
            UNIQUE (study_id, variant, repetition, attempt)
        )
        """,
        "CREATE INDEX study_attempts_run ON study_attempts (run_id)",
        """
        CREATE TABLE study_events (
            study_id   TEXT NOT NULL,
            cursor     INTEGER NOT NULL,
            type       TEXT NOT NULL,
            payload    TEXT NOT NULL,          -- json object, with the revision the change produced
            created_at REAL NOT NULL,
            PRIMARY KEY (study_id, cursor)
        )
        """,
    ),
    # 7: files of worker runs (core/storage/): where an artifact row's path points (`backend`
    # mount/transfer, NULL for a plain path; `mount_label` for mount), and the SHA-256 of each
    # input file the transfer backend lists, recomputed when its size or mtime changes.
    (
        "ALTER TABLE run_artifacts ADD COLUMN backend TEXT",
        "ALTER TABLE run_artifacts ADD COLUMN mount_label TEXT",
        """
        CREATE TABLE file_hashes (
            path       TEXT PRIMARY KEY,
            size       INTEGER NOT NULL,
            mtime_ns   INTEGER NOT NULL,
            sha256     TEXT NOT NULL,
            hashed_at  REAL NOT NULL
        )
        """,
    ),
    # 8: recorded outputs on workers the control plane no longer keeps (evicted or deleted): such
    # a run is not found again from its row, and `sent` 0 means its worker still has to be told
    # (drop_outputs on its next connection).
    (
        """
        CREATE TABLE output_drops (
            run_id      TEXT PRIMARY KEY,
            worker      TEXT NOT NULL,
            sent        INTEGER NOT NULL DEFAULT 0,
            dropped_at  REAL NOT NULL
        )
        """,
    ),
    # 9: how many runs have each status, kept by triggers in the same transaction as the change, so
    # a list's exact `total` is a read of a few rows. Counting a million rows is 5-40 ms on SQLite
    # but 90-145 ms on PostgreSQL, which cannot count from an index alone.
    (
        "CREATE TABLE run_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
        "INSERT INTO run_counts (status, n) SELECT status, COUNT(*) FROM runs GROUP BY status",
        Only("sqlite", f"CREATE TRIGGER runs_counted AFTER INSERT ON runs BEGIN {_COUNT_ONE_MORE}; END"),
        Only("sqlite", "CREATE TRIGGER runs_uncounted AFTER DELETE ON runs BEGIN "
                       "UPDATE run_counts SET n = n - 1 WHERE status = OLD.status; END"),
        Only("sqlite", "CREATE TRIGGER runs_recounted AFTER UPDATE OF status ON runs "
                       "WHEN OLD.status IS NOT NEW.status BEGIN "
                       f"UPDATE run_counts SET n = n - 1 WHERE status = OLD.status; {_COUNT_ONE_MORE}; END"),
        # PostgreSQL: one count per statement for inserts and deletes (a COPY, retention's deletes,
        # through transition tables), and a row trigger only where a status really changes.
        Only("postgresql", """
        CREATE FUNCTION codefy_runs_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO run_counts (status, n) SELECT status, COUNT(*) FROM added GROUP BY status
                ON CONFLICT (status) DO UPDATE SET n = run_counts.n + excluded.n;
            RETURN NULL;
        END $$
        """),
        Only("postgresql", """
        CREATE FUNCTION codefy_runs_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE run_counts SET n = run_counts.n - gone.n
                FROM (SELECT status, COUNT(*) AS n FROM removed GROUP BY status) AS gone
                WHERE run_counts.status = gone.status;
            RETURN NULL;
        END $$
        """),
        Only("postgresql", f"""
        CREATE FUNCTION codefy_runs_moved() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE run_counts SET n = n - 1 WHERE status = OLD.status;
            {_COUNT_ONE_MORE};
            RETURN NULL;
        END $$
        """),
        Only("postgresql", "CREATE TRIGGER runs_counted AFTER INSERT ON runs REFERENCING NEW TABLE AS added "
                           "FOR EACH STATEMENT EXECUTE FUNCTION codefy_runs_added()"),
        Only("postgresql", "CREATE TRIGGER runs_uncounted AFTER DELETE ON runs REFERENCING OLD TABLE AS removed "
                           "FOR EACH STATEMENT EXECUTE FUNCTION codefy_runs_removed()"),
        Only("postgresql", "CREATE TRIGGER runs_recounted AFTER UPDATE OF status ON runs FOR EACH ROW "
                           "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION codefy_runs_moved()"),
    ),
    # 10: the leader lease, the one lease row several control planes on one PostgreSQL database contend
    # for (core/store/lease.py): who leads, the URL it serves on, the fencing epoch every write
    # transaction checks, and when the lease runs out. Created on SQLite too (one schema), where
    # nobody contends: that server always leads.
    (
        """
        CREATE TABLE leader_lease (
            id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
            holder      TEXT,
            url         TEXT,
            epoch       INTEGER NOT NULL,
            expires_at  REAL NOT NULL,
            taken_at    REAL
        ) WITHOUT ROWID
        """,
        "INSERT INTO leader_lease (id, epoch, expires_at) VALUES (1, 0, 0)",
    ),
    # 11: input provenance (options.provenance): the content identity of each dataset or
    # checkpoint file a run's nodes read (core/store/provenance.py). Self-contained: it touches no
    # other table, so a merge may renumber it.
    (
        """
        CREATE TABLE run_inputs (
            id         INTEGER PRIMARY KEY,
            run_id     TEXT NOT NULL,
            node_id    TEXT,
            kind       TEXT NOT NULL,     -- dataset | model
            path       TEXT NOT NULL,
            sha256     TEXT NOT NULL,
            size       INTEGER NOT NULL,
            revision   TEXT,
            n_rows     INTEGER,
            created_at REAL NOT NULL
        )
        """,
        "CREATE INDEX run_inputs_run ON run_inputs (run_id)",
    ),
]

SCHEMA_VERSION = len(SCHEMA_STEPS)


class SchemaVersionError(Exception):
    """The file's schema is newer than this code knows."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(f"schema version {found} is newer than this codefy-jupyter supports ({supported})")
        self.found = found
        self.supported = supported


def read_schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, steps: Sequence[Step] = SCHEMA_STEPS) -> int:
    """Apply the steps the file lacks; return the resulting version.

    `conn` must be in autocommit mode (isolation_level=None): each step opens its own
    `BEGIN IMMEDIATE`, re-reads the version under that lock (another process may have migrated
    meanwhile), and commits the statements and the new user_version together.
    """
    version = read_schema_version(conn)
    if version > len(steps):
        raise SchemaVersionError(version, len(steps))
    for target in range(version + 1, len(steps) + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if read_schema_version(conn) >= target:
                conn.execute("ROLLBACK")
                continue
            for statement in steps[target - 1]:
                if for_backend(statement, "sqlite"):
                    conn.execute(statement)
            # PRAGMA takes no parameters; target is our own int.
            conn.execute(f"PRAGMA user_version = {int(target)}")
            conn.execute("COMMIT")
        except BaseException:
            rollback_quietly(conn)
            raise
    return read_schema_version(conn)


def rollback_quietly(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back (e.g. on SQLITE_FULL); the original error matters more.
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass
