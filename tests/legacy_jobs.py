"""The legacy `jobs` shape the ops runbook exists for: UNLOGGED, no dedupe index, and
active duplicates for every conflict policy among 20,774 rows (the seed's count)."""

from __future__ import annotations

import psycopg

LEGACY_ROW_COUNT = 20_774

# (type, dedupe_key, status, revision, payload, minutes ago) of every duplicated row.
DUPLICATES = [
    # ignore: a running row survives; pending copies are cancelled as duplicates
    ("media.process", "m1:1", "pending", 1, '{"mediaId": "m1", "revision": 1}', 50),
    ("media.process", "m1:1", "in_progress", 1, '{"mediaId": "m1", "revision": 1}', 40),
    ("media.process", "m1:1", "pending", 1, '{"mediaId": "m1", "revision": 1}', 30),
    # ignore: nothing runs; the oldest survives
    ("media.process", "m2:3", "pending", 1, '{"mediaId": "m2", "revision": 3}', 20),
    ("media.process", "m2:3", "pending", 1, '{"mediaId": "m2", "revision": 3}', 10),
    # merge: every id ends up in the survivor
    ("index.sync_delta", "main", "pending", 1, '{"index": "main", "mediaIds": ["a", "b"]}', 45),
    ("index.sync_delta", "main", "pending", 1, '{"index": "main", "mediaIds": ["b", "c"]}', 35),
    ("index.sync_delta", "main", "pending", 1, '{"index": "main", "mediaIds": ["d"]}', 25),
    # supersede: the highest revision wins even though it is the newest
    (
        "source.sync",
        "s1:full",
        "pending",
        1,
        '{"sourceId": "s1", "syncKind": "full", "revision": 4}',
        44,
    ),
    (
        "source.sync",
        "s1:full",
        "pending",
        1,
        '{"sourceId": "s1", "syncKind": "full", "revision": 9}',
        4,
    ),
]

INSERT_DUPLICATE = """
INSERT INTO jobs (id, type, dedupe_key, status, revision, payload, created_at,
                  claim_token, lease_expires_at, attempt_count)
VALUES (gen_random_uuid(), %s, %s, %s, %s, %s::jsonb, now() - make_interval(mins => %s),
        CASE WHEN %s = 'in_progress' THEN gen_random_uuid() END,
        CASE WHEN %s = 'in_progress' THEN now() - interval '1 hour' END,
        CASE WHEN %s = 'in_progress' THEN 1 ELSE 0 END)
"""

FILLER = """
INSERT INTO jobs (id, type, dedupe_key, status, payload, created_at, finished_at)
SELECT gen_random_uuid(),
       'media.process',
       'bulk:' || g,
       CASE WHEN g %% 10 = 0 THEN 'pending' ELSE 'completed' END,
       jsonb_build_object('mediaId', 'bulk-' || g, 'revision', 1, 'note', repeat('x', 40)),
       now() - interval '2 hours',
       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() - interval '1 hour' END
FROM generate_series(1, %s) AS g
"""


def make_legacy(dsn: str, *, rows: int = LEGACY_ROW_COUNT) -> None:
    """Turn a migrated database's `jobs` into the legacy shape, with `rows` rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX jobs_active_dedupe_key")
        conn.execute("ALTER TABLE jobs SET UNLOGGED")
        for job_type, key, status, revision, payload, minutes in DUPLICATES:
            conn.execute(
                INSERT_DUPLICATE,
                (job_type, key, status, revision, payload, minutes, status, status, status),
            )
        conn.execute(FILLER, (rows - len(DUPLICATES),))


def persistence(dsn: str, relation: str = "jobs") -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)", (relation,)
        ).fetchone()
    assert row is not None
    return str(row[0])


def job_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM all_jobs").fetchone()
    assert row is not None
    return int(row[0])
