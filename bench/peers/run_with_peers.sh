#!/usr/bin/env bash
# Run the shared peer benchmark (../shared/bench-peers, read-only) with the jobrelay adapter
# of this directory beside the peers, on one PostgreSQL server, in one run.
#   bench/peers/run_with_peers.sh                 # PEERS="jobrelay pgqueuer oban" REPS=3
#   PEERS="jobrelay pgqueuer oban chancy procrastinate" REPS=3 bench/peers/run_with_peers.sh
# Results (raw lines + medians) go to bench/peers/results/run-<UTC>.txt.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS_DIR="${PEERS_DIR:-/work/shared/bench-peers}"
VENV="${PEERS_VENV:-/tmp/peers-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  # oban needs Python >= 3.12; pyenv's shim for python3.12 exists but fails unless 3.12 is
  # selected, so take the first candidate that really runs.
  PY="${PEERS_PYTHON:-}"
  if [ -z "$PY" ]; then
    for candidate in $(command -v python3.12) /root/.pyenv/versions/3.12*/bin/python3.12; do
      if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
        PY="$candidate"
        break
      fi
    done
  fi
  [ -n "$PY" ] || { echo "run_with_peers.sh: no Python >= 3.12 found; set PEERS_PYTHON" >&2; exit 2; }
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$PEERS_DIR/requirements.txt"
fi
# jobrelay's engine needs only these of its dependencies (the peers pin psycopg already).
"$VENV/bin/pip" install -q --disable-pip-version-check pydantic uuid-utils alembic sqlalchemy \
  prometheus-client
"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e "$REPO"
mkdir -p "$HERE/results"
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
export PEERS="${PEERS:-jobrelay pgqueuer oban}"
export REPS="${REPS:-3}"
export BENCH_OUT="${BENCH_OUT:-$HERE/results}"
export BENCH_PGDATA="${BENCH_PGDATA:-/tmp/jobrelay-bench-peers-pgdata}"
exec "$VENV/bin/python" "$PEERS_DIR/run.py" "$@"
