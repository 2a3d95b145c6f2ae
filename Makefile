# forensics: developer entry points. `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check bench bench-writer eval fixtures clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet torch==2.13.0 || echo "torch not installed: writer/trainer tests will be skipped"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/forensics scan fixtures/runs/ppo_lr_high -o reports/ppo_lr_high

test: $(STAMP)
	$(PY) -m pytest forensics tests

check: $(STAMP)
	$(VENV)/bin/ruff check forensics tests bench scripts
	$(VENV)/bin/mypy forensics

bench: $(STAMP)
	$(PY) bench/bench_scan.py

bench-writer: $(STAMP)
	$(PY) bench/bench_writer.py

eval: $(STAMP)
	$(PY) -m forensics.verdicts.evaluation fixtures/runs reports/detection_quality.json

fixtures: $(STAMP)
	$(PY) scripts/make_fixtures.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
