# The two commands of the README: `make up` and `make test`. Both create the virtualenv
# from the pinned lock file first, so a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install up test test-long test-pg15 system-packages lint typecheck layers unit lock bench clean docs

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
	@echo "==> $(VENV) is ready"

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
test: SYSTEM_PACKAGES = pgbouncer chromium
test: system-packages lint typecheck layers
	$(PY) -m pytest -q -p no:cacheprovider -m "not long"

# The suites that take minutes by design (chaos scenarios at 1/10 scale, a minute of
# rate-limit windows, 30 s of schedule ticks, the many-process fleet, the console in
# Chromium): kept out of `make test` so it stays under 10 minutes on 2 cores; CI (.ci/run)
# runs them after it.
test-long: SYSTEM_PACKAGES = pgbouncer chromium
test-long: system-packages $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m long

# The same suite on Debian's PostgreSQL 15 server (started by the test harness on a loopback
# port with its own data directory) instead of the embedded PostgreSQL 18.
test-pg15: system-packages lint typecheck layers
	JOBRELAY_TEST_PG=15 $(PY) -m pytest -q -p no:cacheprovider -m "not long"

# Debian packages the tests start: PostgreSQL 15 (make test-pg15), PgBouncer (the pooler
# tests of both runs) and Chromium (the console's headless browser check; these two are all
# that `make test` needs). Installed with apt-get when missing (as root), else named with the
# command that installs them.
SYSTEM_PACKAGES ?= postgresql-15 pgbouncer chromium
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

# The generated references (settings, CLI, HTTP) under docs/reference/, from the code.
docs: $(STAMP)
	$(PY) -m jobrelay.reference

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

lock:
	$(PYTHON) -m pip install -q uv
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --python-version 3.11 --generate-hashes -o requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
