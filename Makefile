# The two commands of the README: `make up` and `make test`. Both create the virtualenv
# from the pinned lock file first, so a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install up test test-long test-pg15 system-packages npm lint typecheck layers unit lock bench clean docs

# Runs only when the lock changed. The first run takes minutes, so each phase says what it
# does and pip shows every package it fetches (no -q on the lock step); later runs are silent.
$(STAMP): requirements.lock pyproject.toml
	@echo "==> [1/3] creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] installing the pinned dependencies of requirements.lock (a few minutes the first time)"
	$(PY) -m pip install --disable-pip-version-check --require-hashes -r requirements.lock
	@echo "==> [3/3] installing jobrelay itself (editable)"
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)
	@echo "==> $(VENV) is ready: \`. $(VENV)/bin/activate\` puts the jobrelay command on your PATH"

install: $(STAMP)

up: $(STAMP)
	@echo "==> starting the local stack (PostgreSQL, migrations, SQS/S3 emulator, API, workers)"
	$(VENV)/bin/jobrelay up

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

# pytest exits 5 when it collected nothing; that must fail, so no `|| true` anywhere here.
test: SYSTEM_PACKAGES = pgbouncer chromium prometheus
test: system-packages npm lint typecheck layers
	$(PY) -m pytest -q -p no:cacheprovider -m "not long"

# The suites that take minutes by design (chaos scenarios at 1/10 scale, a minute of
# rate-limit windows, 30 s of schedule ticks, the many-process fleet, the console in
# Chromium, the CLI's longest run of one-shot processes, schemathesis, two relays x 2,000
# items, the e2e kill and restart, the how-to run from a package outside the repository,
# the database crash under load, the traced stack, the e2e through PgBouncer, the one-shot
# commands beside a running `up`): kept out of `make test` so it
# stays under 10 minutes on 2 cores; CI (.ci/run)
# runs them after it.
test-long: SYSTEM_PACKAGES = pgbouncer chromium prometheus
test-long: system-packages $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m long

# The published benchmark tables of docs/benchmarks.md (issue 16) at their published sizes,
# one after the other; hours on 2 cores, so run it on a quiet machine. Figures go to stdout
# (and bench/chaos/results/*.jsonl, bench/peers/results/); docs/benchmarks.md says which
# table each command fills. The peer table needs the shared peer harness (PEERS_DIR=...);
# the 60-minute soak runs with BENCH_SOAK=1.
bench: $(STAMP)
	$(PY) -m bench.scale.jobs
	$(PY) -m bench.scale.batches --reps 30
	for n in 10000 100000 1000000; do BENCH_CONSOLE_JOBS=$$n $(PY) -m bench.console || exit 1; done
	$(PY) -m bench.e2e_batches --items 2000
	$(PY) -m bench.e2e_batches --items 10000 --workers 4 --no-baseline
	$(PY) -m bench.chaos worker-kill --size 20000 --out bench/chaos/results/worker-kill.jsonl
	$(PY) -m bench.chaos worker-stop --size 20000 --setting JOBRELAY_DB_IDLE_IN_TRANSACTION_TIMEOUT_S=5 --out bench/chaos/results/worker-stop.jsonl
	$(PY) -m bench.chaos backend-storm --size 20000 --out bench/chaos/results/backend-storm.jsonl
	$(PY) -m bench.chaos db-restart --size 5000 --out bench/chaos/results/db-restart.jsonl
	$(PY) -m bench.chaos batch-kill --size 5000 --out bench/chaos/results/batch-kill.jsonl
	$(PY) -m bench.chaos partition --size 2000 --out bench/chaos/results/partition.jsonl
	$(PY) -m bench.pressure.claim_plan --pending 1000,100000 --keys 1,10,1000 --churn 20000
	$(PY) -m bench.bad_rows --jobs 3000 --reps 3 --lock-s 60
	$(PY) -m bench.workflows
	@if [ -n "$(PEERS_DIR)" ]; then PEERS_DIR="$(PEERS_DIR)" PEERS="jobrelay jobrelay_durable procrastinate pgqueuer pgqueuer_pool oban chancy bare_insert" bench/peers/run_with_peers.sh; else echo "==> peer table skipped: set PEERS_DIR to the peer harness"; fi
	@if [ "$(BENCH_SOAK)" = 1 ]; then \
		$(PY) -m bench.soak --minutes 60 --rate 100 --out bench/results/soak-free.csv & \
		$(PY) -m bench.soak --minutes 60 --rate 100 --pin-xmin --release-after-min 45 --out bench/results/soak-pinned.csv; \
		wait; \
		$(PY) -m bench.soak_plot bench/results/soak-free.csv bench/results/soak-pinned.csv --png docs/images/soak.png; \
	else echo "==> 60-minute soak skipped: BENCH_SOAK=1 runs it"; fi

# The same suite on Debian's PostgreSQL 15 server (started by the test harness on a loopback
# port with its own data directory) instead of the embedded PostgreSQL 18. Tests marked
# `own_server` start their own embedded server (or none): PostgreSQL 15 never reaches them,
# so running them twice would prove nothing new.
test-pg15: system-packages npm lint typecheck layers
	JOBRELAY_TEST_PG=15 $(PY) -m pytest -q -p no:cacheprovider -m "not long and not own_server"

# Debian packages the tests start: PostgreSQL 15 (make test-pg15), PgBouncer (the pooler
# tests of both runs), Chromium (the console's headless browser check) and Prometheus (its
# `promtool` checks the shipped alert rules of deploy/monitoring/; 19 MB, its daemon is not
# started; these three are all that `make test` needs). Installed with apt-get when missing
# (as root), else named with the command that installs them.
SYSTEM_PACKAGES ?= postgresql-15 pgbouncer chromium prometheus
system-packages:
	@missing=""; for p in $(SYSTEM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "==> installing$$missing with apt-get"; \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	  else \
	    echo "missing Debian packages:$$missing (apt-get install -y$$missing)"; exit 1; \
	  fi; \
	fi

# npm for the TypeScript client check (tests/acceptance/test_typescript_client.py runs `npm ci`
# in a copy of tests/typescript/, then openapi-typescript and tsc): any npm on the PATH (e.g.
# NodeSource's nodejs bundles one), else Debian's nodejs and npm with apt-get when root.
npm:
	@if ! command -v npm >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "==> installing nodejs and npm with apt-get"; \
	    apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm; \
	  else \
	    echo "npm is missing (apt-get install -y nodejs npm): the TypeScript client check will be skipped"; \
	  fi; \
	fi

# The generated references (settings, CLI, HTTP, openapi.json) under docs/reference/, from the code.
docs: $(STAMP)
	$(PY) -m jobrelay.reference

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

lock:
	$(PYTHON) -m pip install -q uv
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --python-version 3.11 --generate-hashes -o requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
