#!/usr/bin/env bash
# Run the shared peer benchmark (its directory is given by PEERS_DIR; it is read-only) with the
# jobrelay adapters of this directory beside every peer, on one PostgreSQL server, in one run,
# through bench/peers/paired.py (per-rep load average, git commit, paired ratios, latency spread).
#   PEERS_DIR=... bench/peers/run_with_peers.sh                    # full size: 5 reps, 50k drains
#   PEERS_DIR=... REPS=1 BENCH_N_DRAIN=3000 BENCH_N_LATENCY=300 bench/peers/run_with_peers.sh
#   PEERS_DIR=... bench/peers/run_with_peers.sh --scenarios enqueue_one,enqueue_bulk \
#       --peers "jobrelay pgqueuer bare_insert" --base main      # enqueue before/after
# Results go to bench/peers/results/paired-<UTC>.txt.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
: "${PEERS_DIR:?set PEERS_DIR to the shared peer harness directory}"
# A venv per checkout: jobrelay is installed into it editable, so two checkouts sharing one
# venv would measure each other's code.
VENV="${PEERS_VENV:-$REPO/.peers-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  # oban needs Python >= 3.12; pyenv's shim for python3.12 exists but fails unless 3.12 is
  # selected, so take the first candidate that really runs.
  PY="${PEERS_PYTHON:-}"
  if [ -z "$PY" ]; then
    for candidate in $(command -v python3.12) "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
      if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
        PY="$candidate"
        break
      fi
    done
  fi
  [ -n "$PY" ] || { echo "run_with_peers.sh: no Python >= 3.12 found; set PEERS_PYTHON" >&2; exit 2; }
  "$PY" -m venv "$VENV"
fi
# The peers at their pinned versions, then jobrelay with its own dependencies (the adapter
# imports jobrelay.bootstrap); the pins are installed again last so that they win.
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$PEERS_DIR/requirements.txt"
"$VENV/bin/pip" install -q --disable-pip-version-check -e "$REPO"
"$VENV/bin/pip" install -q --disable-pip-version-check -r "$PEERS_DIR/requirements.txt"
mkdir -p "$HERE/results"
export PEERS_DIR
export REPS="${REPS:-5}"
export BENCH_N_DRAIN="${BENCH_N_DRAIN:-50000}"
export BENCH_N_LATENCY="${BENCH_N_LATENCY:-2000}"
export BENCH_DRAIN_TIMEOUT="${BENCH_DRAIN_TIMEOUT:-300}"
export BENCH_PEER_TIMEOUT="${BENCH_PEER_TIMEOUT:-1800}"
export BENCH_PGDATA="${BENCH_PGDATA:-/tmp/jobrelay-bench-peers-pgdata}"
exec "$VENV/bin/python" "$HERE/paired.py" "$@"
