# The two commands of the README: `make up` and `make test`. Both create the virtualenv
# from the pinned lock file first, so a fresh machine needs only Python 3.11+ and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install up test lint typecheck layers unit lock bench clean docs

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

up: $(STAMP)
	$(VENV)/bin/jobrelay up

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

layers: $(STAMP)
	$(VENV)/bin/lint-imports

# pytest exits 5 when it collected nothing; that must fail, so no `|| true` anywhere here.
test: lint typecheck layers
	$(PY) -m pytest -q -p no:cacheprovider

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
