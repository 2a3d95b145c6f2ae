# forensics: developer entry points. `make demo` and `make test` are all a fresh machine needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check bench bench-full bench-fleet bench-peers bench-writer eval fixtures fixtures-trl advice-eval fuzz screenshots clean

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

# the full fuzz suite: 10,000+ hostile inputs, counts by outcome (tests/fuzz/__main__.py)
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --cases 10000
	FORENSICS_KILLS=200 $(PY) -m pytest tests/test_output_folder.py -q

# step streams (with and without epoch, 20 and 200 metrics) at 100k and 1M rows, the 10M-row
# sample stream; bench-full adds the 10M-row step streams (about 40 GB of data under bench/data/)
bench: $(STAMP)
	$(PY) bench/bench_scan.py

bench-full: $(STAMP)
	$(PY) bench/bench_scan.py --full

# 1,000 small runs of six formats on the local pool and on Ray: runs per second (budget 15), memory and CPU per worker
bench-fleet: $(STAMP)
	$(PY) bench/bench_fleet.py

# forensics beside its peers on the same files: rldoctor and rlwatch from the package registry, in
# their own venv (never dependencies); 1k/10k/100k rows (time, peak memory, or the failure: runs
# stopped at 300 s or 6 GB), the TRL and real-log corpora (faults found, false alarms). The table
# goes into the README between its bench-peers markers.
PEERS_VENV := .venv-peers

bench-peers: $(STAMP)
	$(PY) bench/bench_peers.py --venv $(PEERS_VENV) --readme

bench-writer: $(STAMP)
	$(PY) bench/bench_writer.py

# The real logs have no labels: each gets one line of findings. Skipped with a note when missing.
REAL_LOGS ?= ../shared/real-logs

eval: $(STAMP)
	$(PY) -m forensics.verdicts.evaluation reference=fixtures/runs trl=fixtures/trl real=fixtures/real --real-logs $(REAL_LOGS) \
		--json reports/detection_quality.json --txt reports/detection_quality.txt

fixtures: $(STAMP)
	$(PY) scripts/make_fixtures.py

# the demo report's first screen at 1400 and 800 px (needs Chromium: apt-get install chromium)
screenshots: $(STAMP)
	$(PY) -m tests.test_browser docs

# The labelled TRL corpus (fixtures/trl/) is written by Hugging Face TRL itself, in its own venv:
# TRL is never a dependency of the analyzer. torch is installed first and pinned to the local CPU
# build (a bare `pip install trl` would pull a multi-GB CUDA torch). TRL 1.16 has no PPO trainer
# (removed after 1.12), so 1.12.0 is installed beside it, without dependencies, for the PPO runs.
TRL_VENV  := .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed
TRL_PINS  := torch==2.13.0 trl==1.16.0 transformers==5.24.0 datasets==5.2.0 accelerate==1.15.0 \
             tokenizers==0.23.3
TRL_PPO   := trl==1.12.0

$(TRL_STAMP):
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install --quiet torch==2.13.0
	$(TRL_VENV)/bin/pip install --quiet $(TRL_PINS)
	$(TRL_VENV)/bin/pip install --quiet --no-deps --target $(TRL_VENV)/trl-ppo $(TRL_PPO)
	touch $(TRL_STAMP)

fixtures-trl: $(TRL_STAMP)
	$(TRL_VENV)/bin/python scripts/trl_corpus.py --out fixtures/trl

# Advice proven by re-training: each faulty TRL corpus run trained again with the scan's config patch
# (same seed and data), scanned again, judged fixed / partly / not fixable by config. The runs are
# trained under .venv-trl/cache/advice-eval (reused while their patch is unchanged); only the
# table is written: reports/advice_quality.md and the README. Not part of `make test`.
advice-eval: $(STAMP) $(TRL_STAMP)
	$(PY) scripts/advice_eval.py --trl-python $(TRL_VENV)/bin/python --report reports/advice_quality.md --readme

clean:
	rm -rf $(VENV) $(TRL_VENV) $(PEERS_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
