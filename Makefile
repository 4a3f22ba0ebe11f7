# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lint verify bench bench-cluster bench-spark bench-elastic bench-bytewax clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) examples/demo.py

lint: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

# Four test processes on two cores: most tests wait on other processes, sockets and Spark. With three, a quiet
# 2-core run used 876 s of CPU in 856 s (one core's worth: half the machine idle); a fourth process fills some of
# that. A file's tests stay together (--dist loadfile) so module fixtures (Spark Connect servers) start once; files
# are handed out in the order tests/conftest.py gives them, the slowest first (--no-loadscope-reorder: else the
# files with most tests go first and a long file of one test starts last).
TEST_PROCESSES ?= 4

# Compiled once here: the tests start hundreds of Python processes, and where PYTHONDONTWRITEBYTECODE is set each
# would compile every module it imports again. mypy (the same check as `make lint`) runs beside the tests, not
# before them: with a cold cache it takes about 10 s of CPU (more of the clock on a busy machine), and the tests
# leave a core idle much of the time (they wait on processes, sockets and Spark). Its report is printed after the
# tests'; either failing fails the run.
test: venv
	$(VENV)/bin/ruff check src tests bench examples
	$(PY) -m compileall -q src tests examples
	types=$$(mktemp); $(VENV)/bin/mypy >$$types 2>&1 & mypy=$$!; \
	$(PY) -m pytest -q -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder; tests=$$?; \
	wait $$mypy; typed=$$?; echo "mypy:"; cat $$types; rm -f $$types; \
	test $$tests -eq 0 && test $$typed -eq 0

verify: venv
	for model in clocks exchange propagation combined datagram rescale; do $(PY) -m pytimely.verify $$model || exit 1; done

bench: venv
	$(PY) bench/bench_progress.py
	$(PY) bench/bench_dataflow.py
	$(PY) bench/bench_cluster.py

bench-cluster: venv
	$(PY) bench/bench_cluster.py

bench-spark: venv
	$(PY) bench/bench_spark.py

bench-elastic: venv
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/bench_elastic.py --png bench/progress_state.png

bench-bytewax: venv
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/bench_dataflow.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
