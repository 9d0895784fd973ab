# Every target installs what it needs: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint bench install clean sandbox-tools

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# Verification commands run under bubblewrap (DESIGN section 6). Without it the runner falls
# back to a weaker sandbox mode and the sandbox tests fail, so install it where missing.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing bubblewrap (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }
	@command -v bwrap >/dev/null 2>&1 || { echo "bubblewrap is required: apt-get install bubblewrap" >&2; exit 1; }

demo: $(STAMP) sandbox-tools
	$(VENV)/bin/steward demo

test: $(STAMP) sandbox-tools
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .steward .pytest_cache .mypy_cache .ruff_cache
