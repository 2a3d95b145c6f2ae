# forensics: developer entry points. `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check bench bench-full bench-fleet eval fixtures clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,ray]'  # ray: forensics fleet --engine ray (tested)
	$(PY) -m pip install --quiet torch==2.13.0 || echo "torch not installed: writer/trainer tests will be skipped"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/forensics scan fixtures/runs/ppo_lr_high -o reports/ppo_lr_high

test: $(STAMP)
	$(PY) -m pytest forensics tests

check: $(STAMP)
	$(VENV)/bin/ruff check forensics tests bench scripts
	$(VENV)/bin/mypy forensics

# step streams (with and without epoch, 20 and 200 metrics) at 100k and 1M rows, the 10M-row
# sample stream; bench-full adds the 10M-row step streams (about 40 GB of data under bench/data/)
bench: $(STAMP)
	$(PY) bench/bench_scan.py

bench-full: $(STAMP)
	$(PY) bench/bench_scan.py --full

# 1,000 runs of 10,000 steps on the local pool and on Ray: runs per second, overhead per run
bench-fleet: $(STAMP)
	$(PY) bench/bench_fleet.py

eval: $(STAMP)
	$(PY) -m forensics.verdicts.evaluation fixtures/runs reports/detection_quality.json

fixtures: $(STAMP)
	$(PY) scripts/make_fixtures.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
