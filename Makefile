# The two commands a newcomer types: `make demo` and `make test`. Everything installs into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Three workers on two cores. The suite is CPU-bound (both cores ~95 % busy), and more workers only
# add contention: in one fresh clone, three took 615 s and 1,137 CPU-seconds, four 654 s (six were
# slower than four, 608 s against 577 s, in another). Its long groups also wait on servers, and
# three keep both cores busy while they do. A file runs whole on one worker (--dist loadgroup), so
# its module-scoped stack is started once. PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= 3

# Python writes its bytecode (into the git-ignored __pycache__ folders) even where the shell asks it
# not to: every test worker, local server and CLI process would otherwise compile the same sources
# again, and pytest would rewrite every test module's asserts in each worker (12 s of CPU per
# worker for the collection alone, against 4 s with the bytecode written).
unexport PYTHONDONTWRITEBYTECODE

TOOLS := .tools
TOOLS_STAMP := $(TOOLS)/.installed

.PHONY: google-schemas workflows-schema components components-if-go pstest-if-go programs programs-venv programs-if-python programs-lock serving serving-if-python serving-lock install test test-fast lint check demo render schema clean tools bundle bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python requirements.txt requirements-cli.txt requirements-dev.txt pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>/dev/null || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The real control plane's components (etcd, the Kubernetes API server, controller manager and
# scheduler, JobSet, Kueue, Google's Pub/Sub fake), built from their Go modules into .cache/components
# (git-ignored); about 16 minutes cold, seconds when nothing changed. See docs/real-cluster.md.
components:
	components/build.sh

# `make test` builds them where Go is installed; elsewhere their tests skip, naming `make components`.
components-if-go:
	@if command -v go >/dev/null 2>&1; then components/build.sh; \
	else echo "no Go toolchain: the real control plane cannot be built here; its tests skip (see make components)"; fi

# Google's Pub/Sub fake alone (about 20 s cold): the demo's events go through it, not a bucket watcher.
pstest-if-go:
	@if command -v go >/dev/null 2>&1; then components/build.sh pstest; \
	else echo "no Go toolchain: pstest cannot be built here; the local stack falls back to a bucket watcher"; fi

# The real MaxText 0.2.4 programs (docs/programs.md): a Python >= 3.12 venv from
# programs/requirements-maxtext.lock in .cache/programs/venv (about 4 minutes cold, rebuilt only when
# the lock changes), then each part of the tier run on what rlpipe renders today, its result stored
# under .cache/programs/results/ by the hash of its inputs (seconds when nothing changed; the
# converters take minutes when the rendering, the lock, the fixture or a driver changed). A program
# that refuses is recorded, not an error here: the tests/programs/test_programs_*.py tests read the results.
programs: $(STAMP)
	programs/venv.sh
	$(BIN)/python -m programs.run

# The programs venv alone (what `make demo PROGRAMS=real` runs the converters with).
programs-venv:
	programs/venv.sh

# `make test` runs the tier where a Python >= 3.12 exists; elsewhere its tests skip, naming `make programs`.
programs-if-python: $(STAMP)
	@if programs/venv.sh --find-python >/dev/null 2>&1; then $(MAKE) --no-print-directory programs; \
	else echo "no Python 3.12 or 3.13: the MaxText programs cannot run here; their tests skip (see make programs)"; fi

# Regenerates programs/requirements-maxtext.lock from programs/requirements-maxtext.in (pip-compile
# with hashes, under the tier's Python; existing pins are kept unless UPGRADE=1). See docs/programs.md.
UPGRADE ?=
programs-lock:
	programs/lock.sh $(if $(UPGRADE),--upgrade)

# The serving tier (docs/evaluation.md): torch and transformers in .cache/serving/venv, from
# programs/requirements-serving.lock (torch from PyPI is its CUDA build: 5.5 GB and a few
# minutes cold, nothing when the lock is unchanged). The tests/programs/test_serving_*.py tests load
# the programs tier's real export with it, through rlpipe's serve check.
serving:
	programs/venv.sh --tier serving

serving-if-python:
	@if programs/venv.sh --find-python >/dev/null 2>&1; then $(MAKE) --no-print-directory serving; \
	else echo "no Python 3.12 or 3.13: the serving tier cannot be built here; its tests skip (see make serving)"; fi

serving-lock:
	programs/lock.sh --tier serving $(if $(UPGRADE),--upgrade)

# Google's published schema of the Workflows syntax, read by the tests out of the workflows-emulator
# wheel in .cache/google-schemas/ (downloaded, never installed; about 2 s and 1.7 MB cold, nothing
# when cached). Every definition the engine's tests load is held to it: docs/workflow.md, Testing.
workflows-schema: $(STAMP)
	$(BIN)/python -m tests.harness.workflow_schema_fetch

# Static infrastructure checkers, isolated: checkov pins many packages of its own.
$(TOOLS_STAMP):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check 'tfparse==0.6.22' 'checkov==3.3.30'
	touch $(TOOLS_STAMP)

tools: $(TOOLS_STAMP)

# The google provider's schema that tests/repo/test_terraform_schema.py holds infra/terraform to: the
# cdktn-provider-google wheel pinned in infra/terraform/google-provider-schema.toml, downloaded by pip
# (hash-checked, never installed) into .cache/google-schemas/ and reduced to JSON there. About 65 MB and
# 5 s cold; a quarter of a second when present. Without it those tests skip, naming this target.
google-schemas: $(STAMP)
	$(BIN)/python -m tests.harness.google_schemas

# The Cloud Functions source zip Terraform uploads (build/functions-source.zip).
bundle:
	infra/bundle.sh

lint: $(STAMP)
	$(BIN)/ruff check .

# The static checks (also the pre-commit hooks): style, format, layers, types, dependencies.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/deptry shared functions

# Debian's Chromium, for the report's browser test (tests/report/test_report_chromium.py): installed
# quietly when /usr/bin/chromium is missing. Without root or apt-get it says so and goes on; the test
# then skips, naming this target (under CI=true it fails instead).
.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" != 0 ]; then echo "browser: not root, so Debian's chromium is not installed; the report's browser test skips"; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "browser: no apt-get, so Debian's chromium is not installed; the report's browser test skips"; \
	else echo "browser: installing Debian's chromium (apt-get)"; \
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then \
			apt-get update -qq >/dev/null 2>&1; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
				|| echo "browser: apt-get could not install chromium; the report's browser test skips"; \
		fi; \
	fi

test: check $(TOOLS_STAMP) google-schemas workflows-schema components-if-go browser programs-if-python serving-if-python
	$(BIN)/python -m compileall -q shared functions tests bench
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The edit loop: unit and contract tests, none that starts a local server (under a minute).
# `make test` runs these and everything else; CI runs `make test`.
test-fast: $(STAMP) $(TOOLS_STAMP) google-schemas workflows-schema
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not integration and not slow" $(PYTEST_ARGS)

SCENARIO ?=
EVENTS ?= auto
CLUSTER ?= double
PROGRAMS ?= played

# The whole pipeline on this machine: `make demo SCENARIO=preempt` shows a resume (simulated cluster);
# `make demo CLUSTER=real` runs it on the real control plane, built first where Go is installed
# (without Go or the binaries it stops at once, naming `make components`); `make demo PROGRAMS=real`
# has convert and export run MaxText's real converters on the tiny Gemma 4 fixture (minutes each;
# the programs venv is built first, about 4 minutes cold; Python >= 3.12 needed, see docs/programs.md).
# The scenario, cluster and programs are checked first: a typo, a scenario the real plane cannot
# play, or real programs without a Python >= 3.12 are refused before anything is built (the
# components take 16-28 minutes cold).
demo: $(STAMP)
	@$(BIN)/rlpipe demo --check --scenario "$(SCENARIO)" --cluster "$(CLUSTER)" --programs "$(PROGRAMS)"
	@$(MAKE) --no-print-directory pstest-if-go $(if $(filter real,$(CLUSTER)),components-if-go) $(if $(filter real,$(PROGRAMS)),programs-venv)
	$(BIN)/rlpipe demo --scenario "$(SCENARIO)" --events "$(EVENTS)" --cluster "$(CLUSTER)" --programs "$(PROGRAMS)"

# Benchmarks (figures next to same-run baselines) → bench/RESULTS.md; see bench/README.md.
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python -m bench.run_all $(BENCH_ARGS)

render: $(STAMP)
	@for f in examples/*.yaml; do echo "# $$f"; $(BIN)/rlpipe render $$f --bucket demo-artifacts; done

schema: $(STAMP)
	$(BIN)/rlpipe schema > shared/rlpipe/core/request.schema.json

clean:
	rm -rf $(VENV) $(TOOLS) .pytest_cache .ruff_cache .hypothesis build
