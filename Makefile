# The two set-up commands of the README: `make run` (embedded demo) and `make test` (whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL ?= mysql://recovery_console:recovery_console@127.0.0.1:3306/recovery_console
TEST_REDIS_URL ?= redis://127.0.0.1:6379/9

.PHONY: run test check env

$(VENV)/.installed: requirements.txt
	scripts/system-packages.sh build
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

env: $(VENV)/.installed

# Embedded default: SQLite, in-process tasks, the simulated cluster, http://127.0.0.1:8000
run: env
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	$(PY) manage.py run_demo --addr 127.0.0.1 --port 8000

# The whole suite against real MariaDB and Redis (started here when they are down).
test: env
	scripts/system-packages.sh test
	scripts/test-services.sh
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(VENV)/bin/pytest -n 2

check: env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) manage.py makemigrations --check --dry-run
