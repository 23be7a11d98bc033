"""Ablation: jobrelay with durable claim commits (`synchronous_commit=on`, as every peer).

The production worker commits claims without waiting for the WAL flush (see
`jobs/queries/claim_session.sql`: a claim lost in a server crash only makes the job pending
again). This adapter keeps everything else of `peer_jobrelay` (the generic claim plan
included) and sets `synchronous_commit=on` again on the claim connection after the
production session settings, so readers see what the asynchronous claim commit buys.
"""

from __future__ import annotations

import peer_jobrelay

from jobrelay.db.pool import Connection
from jobrelay.jobs import claims

_PRODUCTION = claims.configure_claim_session


async def _durable_claim_session(conn: Connection) -> None:
    await _PRODUCTION(conn)
    await conn.execute("SELECT set_config('synchronous_commit', 'on', false)")
    cursor = await conn.execute("SHOW synchronous_commit")
    row = await cursor.fetchone()
    if row is None or row["synchronous_commit"] != "on":
        raise RuntimeError(f"the claim connection kept synchronous_commit={row!r}")


# The worker's producer builds its claim pool with `claims.configure_claim_session`
# (producer.py, at construction); this process only runs the benchmark, so replacing it
# here changes nothing else.
claims.configure_claim_session = _durable_claim_session


class Adapter(peer_jobrelay.Adapter):
    name = "jobrelay_durable"
