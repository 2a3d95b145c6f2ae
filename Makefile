# forensics: developer entry points. `make demo` and `make test` are all a fresh machine needs.
# Both use one venv, .venv: `make demo` installs the runtime only (its stamp .venv/.runtime),
# `make test` adds the dev tools, Ray and torch's CPU build (.venv/.dev), whichever comes first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.runtime
STAMP  := $(VENV)/.dev
# torch for the writer/trainer tests: the CPU build (PyPI's Linux torch is a CUDA build of several
# GB). The CPU index serves it as 2.13.0+cpu, which pip prefers to PyPI's 2.13.0; where pip is set up
# with a local wheel (find-links), that is taken and an unreachable index only costs pip's retries.
# `make test TORCH_INDEX=` asks PyPI alone.
TORCH       := torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test browser check bench bench-full bench-fleet bench-peers bench-writer eval fixtures fixtures-trl advice-eval fuzz screenshots docs clean

# The figures: a fresh clone on a busy 2-core machine with a warm pip cache (2 min 7 s, 760 MB; then
# 3 min 15 s, 2.3 GB in all); a cold cache downloads the wheels too.
$(RUNTIME_STAMP): pyproject.toml
	@echo "Setting up $(VENV) with the runtime only (numpy, pandas, scipy, pyarrow, polars, ...):"
	@echo "about 760 MB, 1-3 minutes on a first run; later runs start at once."
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP) pyproject.toml
	@echo "Adding the dev tools, Ray and torch (CPU) to $(VENV) for the tests: about 1.6 GB more, 2-4 minutes on a first run."
	$(PY) -m pip install --quiet -e '.[dev,ray]'  # ray: forensics fleet --engine ray (tested)
	$(PY) -m pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(TORCH) 2>$(VENV)/torch-install.log \
		|| echo "torch not installed (why: $(VENV)/torch-install.log): the writer/trainer tests will be skipped"
	touch $(STAMP)

demo: $(RUNTIME_STAMP)
	$(VENV)/bin/forensics scan fixtures/runs/ppo_lr_high -o reports/ppo_lr_high
	@echo ""
	@echo "next: open reports/ppo_lr_high/report.html, or scan your own log:"
	@echo "  $(VENV)/bin/forensics scan YOUR_LOG -o reports/mine"
	@echo "  (or 'source $(VENV)/bin/activate' once, then 'forensics scan YOUR_LOG')"

# The browser tests (tests/test_browser.py) drive Debian's Chromium, installed here where the machine
# allows it (root, apt-get); elsewhere one line says that they skip and why.
CHROMIUM_SKIP := no Chromium (apt-get install chromium, or set FORENSICS_CHROMIUM): tests/test_browser.py will be skipped

browser:
	@if [ -n "$$FORENSICS_CHROMIUM" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Debian's chromium for the browser tests (tests/test_browser.py)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
			|| echo "chromium could not be installed: $(CHROMIUM_SKIP)"; \
	else echo "$(CHROMIUM_SKIP)"; fi

# -rs: every skipped test says why at the end
test: $(STAMP) browser
	$(PY) -m pytest -rs forensics tests

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

# 1,000 small runs of six formats on the local pool and on Ray: runs per second (budget 30), memory a worker (Ray at most 1.3x the local pool)
bench-fleet: $(STAMP)
	$(PY) bench/bench_fleet.py

# forensics beside its peers on the same files: rldoctor and rlwatch from the package registry, in
# their own venv (never dependencies); 1k/10k/100k rows (time, peak memory, or the failure: runs
# stopped at 300 s or 6 GB), the TRL and real-log corpora (faults found, false alarms). The table
# goes into docs/peers.md between its bench-peers markers.
PEERS_VENV := .venv-peers

bench-peers: $(STAMP)
	$(PY) bench/bench_peers.py --venv $(PEERS_VENV) --docs

bench-writer: $(STAMP)
	$(PY) bench/bench_writer.py

# The real logs have no labels: each gets one line of findings. Skipped with a note when missing.
# The real logs and the labelled real corpus (fixtures/real/labels.json's root) live outside the
# repository: the tracked figures (reports/detection_quality.*) are rewritten only when both are
# there; without them the figures go to build/eval/ (untracked), with a note.
REAL_LOGS     ?= ../shared/real-logs
REAL_LABELLED := ../shared/real-logs/calibration
EVAL_OUT       = $(if $(and $(wildcard $(REAL_LOGS)/.),$(wildcard $(REAL_LABELLED)/.)),reports,build/eval)

eval: $(RUNTIME_STAMP)
	@mkdir -p $(EVAL_OUT)
	@[ "$(EVAL_OUT)" = reports ] || echo "note: $(REAL_LOGS) or $(REAL_LABELLED) not found: those corpora are skipped and the figures go to $(EVAL_OUT)/ (untracked); reports/detection_quality.* are left as they are"
	$(PY) -m forensics.verdicts.evaluation reference=fixtures/runs trl=fixtures/trl real=fixtures/real --real-logs $(REAL_LOGS) --metamorphic \
		--json $(EVAL_OUT)/detection_quality.json --txt $(EVAL_OUT)/detection_quality.txt

fixtures: $(STAMP)
	$(PY) scripts/make_fixtures.py

# the documentation site into build/site/ (strict: a warning fails; tests/test_docs.py builds it too)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# the demo report's first screen at 1400 and 800 px (needs Chromium: apt-get install chromium)
screenshots: $(STAMP)
	$(PY) -m tests.test_browser docs

# Hugging Face's trainers run in venvs of their own (transformers and TRL are never dependencies of
# the analyzer), built by `make test`: .venv-trl (the newest transformers with TRL) for the
# real-Trainer tests (tests/test_callback.py: the callback in a Trainer and in TRL's GRPOTrainer, a
# tiny random model built locally), tests/test_advice_eval.py and the labelled TRL corpus
# (fixtures/trl/); .venv-tf440 (transformers 4.40, the oldest the callback supports) for the
# callback's test there. Each is layered on .venv: a .pth file puts .venv's site-packages after its
# own, so torch (the CPU build), tensorboard and the analyzer's dependencies are .venv's (no second
# torch) and only the Hugging Face packages are installed, shadowing .venv's where a pin asks for
# another version (pip never uninstalls outside its own environment: .venv is left as it is).
# torch is installed there only where .venv lacks torch 2.13.0, and then as in .venv (a bare
# `pip install trl` would pull a multi-GB CUDA torch). TRL 1.16 has no PPO trainer (removed after
# 1.12), so 1.12.0 is installed beside it, without dependencies, for the corpus' PPO runs.
# The figures (a fresh clone on the 2-core machine, both venvs): 31-38 s (no pip cache), 380 MB; the
# tests they let run (the real-Trainer ones in test_callback.py, test_advice_eval.py) about 75 s.
TRL_VENV    := .venv-trl
TRL_STAMP   := $(TRL_VENV)/.layered
TRL_PINS    := trl==1.16.0 transformers==5.24.0 datasets==5.2.0 accelerate==1.15.0 tokenizers==0.23.3
TRL_PPO     := trl==1.12.0
TF440_VENV  := .venv-tf440
TF440_STAMP := $(TF440_VENV)/.installed
TF440_PINS  := transformers==4.40.2 accelerate==0.34.2 tokenizers==0.19.1
SITE        := import sysconfig; print(sysconfig.get_paths()["purelib"])
HAS_TORCH   := import importlib.metadata as m; assert m.version("torch").split("+")[0] == "$(patsubst torch==%,%,$(TORCH))"

# $(call layered,VENV,PINS): VENV over .venv's site-packages, with PINS installed in it
define layered
	@echo "Setting up $(1) over $(VENV) (torch and the rest are $(VENV)'s): $(2)"
	test -x $(1)/bin/python || $(PY) -m venv $(1)
	$(PY) -c '$(SITE)' > "$$($(1)/bin/python -c '$(SITE)')/forensics-venv.pth"
	$(1)/bin/python -c '$(HAS_TORCH)' 2>/dev/null \
		|| $(1)/bin/pip install --quiet $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(TORCH)
	$(1)/bin/pip install --quiet $(TORCH) $(2)
endef

$(TRL_STAMP): | $(STAMP)
	$(call layered,$(TRL_VENV),$(TRL_PINS))
	$(TRL_VENV)/bin/pip install --quiet --no-deps --upgrade --target $(TRL_VENV)/trl-ppo $(TRL_PPO)
	touch $(TRL_STAMP)

# the name scripts and tests give (`make .venv-trl/.installed`); a .venv-trl of its own, built before
# the layering, is layered by the stamp above (its torch then stays first)
$(TRL_VENV)/.installed: $(TRL_STAMP)
	touch $@

$(TF440_STAMP): | $(STAMP)
	$(call layered,$(TF440_VENV),$(TF440_PINS))
	touch $(TF440_STAMP)

# `make test` builds both (a rule of its own here, below the names: a rule's prerequisites are
# expanded where it is read)
test: $(TRL_STAMP) $(TF440_STAMP)

fixtures-trl: $(TRL_STAMP)
	$(TRL_VENV)/bin/python scripts/trl_corpus.py --out fixtures/trl

# Advice proven by re-training: each faulty TRL corpus run trained again with the scan's config patch
# (same seed and data), scanned again, judged fixed / partly / not fixable by config. The runs are
# trained under .venv-trl/cache/advice-eval (reused while their patch is unchanged); only the
# table is written: reports/advice_quality.md and docs/advice.md. Not part of `make test`.
advice-eval: $(STAMP) $(TRL_STAMP)
	$(PY) scripts/advice_eval.py --trl-python $(TRL_VENV)/bin/python --report reports/advice_quality.md --docs

clean:
	rm -rf $(VENV) $(TRL_VENV) $(TF440_VENV) $(PEERS_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
