# One command per chore. `make run` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The exact torch build for this project's machines (a CPU wheel); pyproject keeps a range for users.
TORCH_PIN := torch==2.13.0
HOST ?= 127.0.0.1
PORT ?= 8000

# Debian packages: bubblewrap (the sandbox), chromium (browser tests) and postgresql (the server
# the test suite starts for its PostgreSQL tier; Debian keeps initdb in /usr/lib/postgresql/*/bin).
# Installed when root; otherwise named, and the tutor still runs (with a process-only sandbox, said
# on its pages) and the suite skips what needs them.
SYSTEM_PACKAGES := bwrap:bubblewrap chromium:chromium initdb:postgresql

.PHONY: install system-deps run test lint typecheck bench gpu-check vendor i18n

install: system-deps $(STAMP)

system-deps:
	@PATH="$$PATH$$(printf ':%s' /usr/lib/postgresql/*/bin)"; missing=""; for p in $(SYSTEM_PACKAGES); do \
	  command -v $${p%%:*} >/dev/null || missing="$$missing $${p##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing >/dev/null; \
	  else echo "treino: missing system packages:$$missing (apt-get install$$missing)"; fi; fi

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH_PIN)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

run: install
	$(VENV)/bin/treino serve --host $(HOST) --port $(PORT)

test: install lint typecheck
	$(VENV)/bin/treino lessons check
	$(VENV)/bin/pytest

# ruff's rules, then its formatter as a check (`ruff format app worker tests migrations bench` fixes it)
lint: install
	$(VENV)/bin/ruff check app worker tests migrations bench
	$(VENV)/bin/ruff format --check app worker tests migrations bench

# mypy as pyproject's [tool.mypy] says (strict where the contracts live), then the harness again
# as the program it is in the sandbox: its modules import each other by bare name (run.py puts
# worker/harness on sys.path), so there they are top-level modules. Its bodies are checked where
# annotated; it patches torch at run time, which --check-untyped-defs would refuse throughout.
typecheck: install
	$(VENV)/bin/mypy
	MYPYPATH=worker/harness $(VENV)/bin/mypy --explicit-package-bases --no-check-untyped-defs \
		worker/harness/*.py

# Latency and throughput of grading and pages on this machine (about 10 minutes; uses the
# PostgreSQL at TREINO_BENCH_POSTGRES_URL, default 127.0.0.1:5432, when it is there).
bench: install
	$(PY) -m bench

# On a machine with CUDA: prove the GPU path (sandbox bound to one GPU, every exercise, figures,
# a submission end to end) in under 8 minutes, writing docs/gpu.md; non-zero if a check failed.
# Without CUDA it says so in one line and exits 0.
gpu-check: install
	$(PY) -m bench.gpu

# Rebuild static/vendor/ from frontend/'s lock file (needs Node; the result is committed).
vendor:
	cd frontend && npm ci --ignore-scripts --no-audit --no-fund && npm run build

# Refresh the message catalogs after changing UI strings; then translate what is new in the .po.
i18n: install
	$(VENV)/bin/pybabel extract -F babel.cfg -k _ -k gettext -k ngettext:1,2 --no-location \
		--omit-header -o app/locales/messages.pot .
	$(VENV)/bin/pybabel update -i app/locales/messages.pot -d app/locales -D messages \
		--no-fuzzy-matching --ignore-obsolete
