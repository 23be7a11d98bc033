#!/usr/bin/env bash
# bench.drain_ablation at a base revision and at this checkout, alternating one rep at a
# time (five rounds by default) so both see the same machine, each with a data directory of
# its own. The base runs from a temporary git worktree on this checkout's virtualenv.
#   bench/paired_ablation.sh 7c0e795            # ROUNDS=5 JOBS=5000
set -euo pipefail
BASE="${1:?usage: bench/paired_ablation.sh BASE_REVISION}"
ROUNDS="${ROUNDS:-5}"
JOBS="${JOBS:-5000}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="$REPO/.venv/bin/python"
WORK="$(mktemp -d)"
trap 'git -C "$REPO" worktree remove --force "$WORK/base" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
git -C "$REPO" worktree add -q --detach "$WORK/base" "$BASE"
mkdir -p "$WORK/tmp-base" "$WORK/tmp-head"
for round in $(seq 1 "$ROUNDS"); do
  for side in base head; do
    if [ "$side" = base ]; then dir="$WORK/base"; else dir="$REPO"; fi
    echo "# round $round side $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd "$dir" && TMPDIR="$WORK/tmp-$side" PYTHONPATH="$dir/src:$dir" \
      "$PY" -m bench.drain_ablation --jobs "$JOBS" --reps 1 | grep -E "median|load average")
  done
done
