# Everything a fresh machine needs, then the demo, the tests or the benchmarks.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian packages: JDBC drivers (jars in /usr/share/java), a JRE for JPype, and the database
# server binaries the tests and the demo start throwaway servers from.
DEB_PACKAGES := libpostgresql-jdbc-java libmariadb-java libderby-java libderbyclient-java postgresql mariadb-server

.PHONY: help system-deps install lint typecheck unit test test-full test-mysql test-mariadb11 test-install test-versions chaos failover failover-run demo demo-streaming bench bench-quick bench-floor spin-deps model model-mutants clean

help:
	@echo "make demo     set up, start a throwaway PostgreSQL, write exactly once through faults, two tables through a driver kill, then the streaming demo"
	@echo "make demo-streaming  a stream of micro-batches, crashed mid-commit and replayed"
	@echo "make unit     the fast tests alone: no database, no Spark, no JVM"
	@echo "make test     lint and run the test suite against throwaway PostgreSQL, MariaDB 10.11 and 11.8, and MySQL"
	@echo "make test-full  every case on every database (make test runs a long test's MariaDB case only here)"
	@echo "make test-mysql  every MySQL case of the suite (make test runs those marked mysql_ci)"
	@echo "make test-mariadb11  every MariaDB 11.8 case of the suite (make test runs those marked mariadb11_ci)"
	@echo "make test-install  the wheel in a fresh venv (classic and Connect), and an editable install"
	@echo "make test-versions  a smoke of every path under each PySpark 3.5 to 4.3, each in its own venv (VERSIONS=4.0,4.1: some)"
	@echo "make chaos    the full chaos suite (driver kills, racing recoveries, restarts, cuts, soak), then make failover"
	@echo "make failover  failover: a primary with a synchronous standby (PostgreSQL) or a semi-synchronous replica (MariaDB 10.11, 11.8, MySQL 9.7), killed at each point of a job"
	@echo "make bench    benchmark write_xa against Spark JDBC and the raw bulk-load limit, a stream of 1k-row micro-batches, and two-table transactions"
	@echo "make bench-quick  the same, small (CI smoke)"
	@echo "make bench-floor  the small write's and the stream's targets side by side, 3 runs: each ratio's median and spread"
	@echo "make install  install xasink (editable) with its test dependencies"
	@echo "make model    exhaustively model-check the protocol with spin (model/xasink.pml)"
	@echo "make model-mutants  check that spin finds each re-introduced old bug"

system-deps:
	@missing=""; \
	for pkg in $(DEB_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

install: system-deps
	$(PIP) install -q -e '.[test,bench,connect]'

lint: typecheck
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# mypy --strict on the package, configured in pyproject.toml ([tool.mypy]).
typecheck:
	$(PYTHON) -m mypy

# The fast layer alone: no database, no Spark, no JVM (seconds).
unit:
	$(PYTHON) -m pytest -q tests/unit

# Spark Connect client tests run in a pytest process of their own (tests/conftest.py).
test: install lint
	@start=$$(date +%s); status=0; \
	XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m "not connect_client" --durations=15 || status=1; \
	XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m connect_client || status=1; \
	$(PYTHON) -m tests.servers_report $$start; exit $$status

# The wheel in a fresh virtual environment (classic and Connect), and an editable install.
test-install: install
	XASINK_TEST_INSTALL=1 XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q tests/test_install.py

# A smoke of every public path (tests/test_versions.py) on PostgreSQL and MariaDB under each
# PySpark minor release, each in a virtual environment of its own, made once in
# ~/.cache/xasink/versions (tests/versions.py); VERSIONS=4.0,4.1 runs some. Not in CI: about
# 10 minutes on 2 cores, after the first run's downloads.
VERSIONS ?=
test-versions: system-deps
	$(PYTHON) -m tests.versions $(VERSIONS)

# Everything make test leaves out: every case on every database (MySQL, MariaDB 11.8 included), both
# pytest processes. Over an hour on 2 cores.
test-full: install lint
	@start=$$(date +%s); status=0; \
	XASINK_TEST_FULL=1 XASINK_TEST_MYSQL=all XASINK_TEST_MARIADB11=all XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m "not connect_client" --durations=15 || status=1; \
	XASINK_TEST_FULL=1 XASINK_TEST_MYSQL=all XASINK_TEST_MARIADB11=all XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m connect_client || status=1; \
	$(PYTHON) -m tests.servers_report $$start; exit $$status

# Every MySQL case of the suite (CI runs those marked mysql_ci); builds the MySQL root once.
test-mysql: install
	XASINK_TEST_MYSQL=only XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m "not connect_client" --durations=15

# Every MariaDB 11.8 case of the suite (CI runs those marked mariadb11_ci); builds its root once.
test-mariadb11: install
	XASINK_TEST_MARIADB11=only XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -m "not connect_client" --durations=15

# The full chaos run, then the failover kills; XASINK_CHAOS_SEED=N replays one. The tables
# are printed even on failure.
chaos: install
	rm -f .pytest_cache/xasink-chaos/results.jsonl
	XASINK_CHAOS_FULL=1 XASINK_TEST_FULL=1 XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -s tests/test_chaos.py tests/test_stream_kills.py; \
	status=$$?; $(PYTHON) -m tests.chaos_report || status=1; \
	$(MAKE) --no-print-directory failover-run || status=1; exit $$status

# PostgreSQL failover (tests/test_failover.py): a primary with a synchronous streaming standby,
# SIGKILLed at each point of a job in each mode, the standby promoted and recovered. The table
# of kills is printed even on failure. About 5 minutes on 2 cores.
failover: install failover-run

failover-run:
	@start=$$(date +%s); rm -f .pytest_cache/xasink-failover/results.jsonl; \
	XASINK_FAILOVER=1 XASINK_TEST_REQUIRE_SERVERS=1 $(PYTHON) -m pytest -q -s tests/test_failover.py; \
	status=$$?; $(PYTHON) -m tests.failover_report || status=1; \
	echo "make failover: $$(( $$(date +%s) - start )) s"; exit $$status

# Exhaustive spin model checking of the commit protocol (model/README.md); no database needed.
spin-deps:
	@command -v spin >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 || { \
	  echo "installing Debian packages: spin gcc"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq spin gcc; }

model: spin-deps
	sh model/check.sh model

model-mutants: spin-deps
	sh model/check.sh mutants

demo: install
	$(PYTHON) examples/demo.py
	$(PYTHON) examples/transaction_demo.py
	$(PYTHON) examples/streaming_demo.py

demo-streaming: install
	$(PYTHON) examples/streaming_demo.py

bench: install
	$(PYTHON) -m benchmarks
	$(PYTHON) -m benchmarks.breakdown stages
	$(PYTHON) -m benchmarks.breakdown memory
	$(PYTHON) -m benchmarks.breakdown fixed
	$(PYTHON) -m benchmarks.breakdown branches --databases mariadb
	$(PYTHON) -m benchmarks.breakdown format-batch

# The small write at its floor: every ratio of a small call and a stream beside its floor,
# in 3 runs of their own, with each ratio's median and spread (benchmarks/floor.py; 27
# minutes on 2 cores).
bench-floor: install
	$(PYTHON) -m benchmarks.floor --output-dir benchmarks/results/floor

bench-quick: install
	$(PYTHON) -m benchmarks --quick --output-dir "$$(mktemp -d)"

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache .mypy_cache spark-warehouse
