# Everything a fresh machine needs, then the demo, the tests or the benchmarks.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian packages: JDBC drivers (jars in /usr/share/java), a JRE for JPype, and the database
# server binaries the tests and the demo start throwaway servers from.
DEB_PACKAGES := libpostgresql-jdbc-java libmariadb-java postgresql mariadb-server

.PHONY: help system-deps install lint test demo bench bench-quick breakdown clean

help:
	@echo "make demo     set up, start a throwaway PostgreSQL, write exactly once through faults"
	@echo "make test     lint and run the test suite against throwaway PostgreSQL and MariaDB"
	@echo "make bench    benchmark write_xa against Spark JDBC and the raw bulk-load limit"
	@echo "make bench-quick  the same, small (CI smoke)"
	@echo "make install  install xasink (editable) with its test dependencies"

system-deps:
	@missing=""; \
	for pkg in $(DEB_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

install: system-deps
	$(PIP) install -q -e '.[test,bench]'

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

test: install lint
	XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q

demo: install
	$(PYTHON) examples/demo.py

bench: install
	$(PYTHON) -m benchmarks
	$(PYTHON) -m benchmarks.breakdown stages
	$(PYTHON) -m benchmarks.breakdown memory
	$(PYTHON) -m benchmarks.breakdown formats

bench-quick: install
	$(PYTHON) -m benchmarks --quick --output-dir "$$(mktemp -d)"

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache spark-warehouse
