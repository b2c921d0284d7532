# The project's two commands: `make demo` (the main job) and `make test` (the whole suite).
# Each does its own set-up on a fresh machine: venv, editable install, system packages as root.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# The package alone (what `make demo` needs); the test stamp implies it.
PACKAGE_STAMP := $(VENV)/.package-stamp

.PHONY: demo test lint typecheck pytest docs bench venv system clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP) $(PACKAGE_STAMP)

# Not the test extra: SWE-bench, Ray, scipy and Playwright are for the tests, not the demo.
$(PACKAGE_STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	@touch $(PACKAGE_STAMP)

# System packages and services the tests need (docker engine, base image, debootstrap, git).
system:
	bash scripts/ensure-system.sh

demo: $(PACKAGE_STAMP)
	bash scripts/demo.sh

test: venv system lint typecheck pytest docs

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy

# pytest exits 5 when it collected no test: make treats that as a failure, as it should.
pytest: venv
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): --strict fails on a broken link or anchor, a page
# left out of the nav, a missing snippet. Written to the ignored site/.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Every bench writes bench/results/NAME.json with the load average at its start and end; the
# last step prints one table: each target, its figure, the load, met or missed. `-` keeps going
# past a bench that fails, so the table shows what was measured.
bench: venv system
	rm -f bench/results/*.json  # a bench that fails must not show an old figure
	-$(PY) -m bench.scheduler
	-$(PY) -m bench.tracing
	-$(PY) -m bench.sandbox
	-$(PY) -m bench.mcp
	-$(PY) -m bench.surface
	-$(PY) -m bench.search
	-$(PY) -m bench.startup
	-$(PY) -m bench.front
	-$(PY) -m bench.inspect_sandbox
	-$(PY) -m bench.campaign
	-$(PY) -m bench.density
	-$(PY) -m bench.eval_set
	-$(PY) -m bench.dashboard
	-$(PY) -m bench.scale
	-$(PY) -m bench.swebench_scale
	$(PY) -m bench.summary

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache site
