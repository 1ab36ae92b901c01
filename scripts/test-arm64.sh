#!/usr/bin/env bash
# test-arm64.sh: builds replyd and its engine tests for linux/arm64
# (scripts/arm64-env.sh) and runs them under qemu-user, without binfmt:
# `qemu-aarch64-static -L /usr/aarch64-linux-gnu` runs each test binary
# directly. What runs: replyd's Whisper kernels against the scalar and Go
# references, Whisper's conformance against whisper.cpp's tokens on the
# shared data ($REPLYD_TESTDATA; ARM64_CONFORMANCE picks the tests, default
# all four), the language model on the demo model and on a model with
# Qwen2.5's vocabulary, Silero VAD against ONNX Runtime, and a short
# serve-and-infer run of bin/arm64/replyd on the demo models. `make
# test-arm64` runs it; each step prints its time.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# shellcheck source=/dev/null
source "$root/scripts/arm64-env.sh"
for t in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-aarch64-static; do
	command -v "$t" >/dev/null || { echo "test-arm64: $t is missing: scripts/deps.sh arm64 installs it" >&2; exit 2; }
done
[ -e /usr/lib/aarch64-linux-gnu/libopenblas.so ] ||
	{ echo "test-arm64: the arm64 OpenBLAS is missing: scripts/deps.sh arm64 installs libopenblas-dev:arm64" >&2; exit 2; }
qemu=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
# OpenBLAS 0.3.21's threaded server spins forever under qemu-user on an x86
# host (a plain C program linked with Debian's arm64 libopenblas hangs in
# its constructor with 2 threads and runs with 1): one OpenBLAS thread, which
# replyd keeps as the admin's cap (engine/whisper's blasThreadCap).
export OPENBLAS_NUM_THREADS=1
out="$root/bin/arm64"
mkdir -p "$out"

step() { # step NAME COMMAND...: runs COMMAND, printing its time
	local name="$1" start rc=0
	shift
	start=$(date +%s)
	"$@" || rc=$?
	echo "test-arm64: $name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)") in $(($(date +%s) - start)) s" >&2
	return "$rc"
}

step "build bin/arm64/replyd" nice -n 10 go build -o "$out/replyd" ./cmd/replyd
for pkg in whisper llm vad; do
	step "build the $pkg tests" nice -n 10 go test -c -o "$out/$pkg.test" "./engine/$pkg/"
done

# Test binaries run in their package's folder (testdata is relative), on
# the host's Go environment (GOARCH=arm64 would confuse nothing there, but
# the tests' own tools, e.g. node for the VAD reference, are the host's).
# shellcheck disable=SC2317 # called through step
runtests() { # runtests PKG PATTERN
	(cd "engine/$1" && "${qemu[@]}" "$out/$1.test" -test.count=1 -test.timeout 60m -test.run "$2")
}
rc=0
step "whisper kernels" runtests whisper \
	'^(TestDequantMatchesReference|TestF16Conversion|TestLinearPaths|TestSoftmaxGeluAttention|TestAttentionF16|TestLinearsShareInput|TestFFTMatchesDFT)$' || rc=1
step "whisper conformance" runtests whisper "${ARM64_CONFORMANCE:-^TestConformance}" || rc=1
step "language model" runtests llm \
	'^(TestWriteDemoModel|TestQuantizedModel|TestGenerateDistinctCandidates|TestGenerateRepeatableWithSeed|TestGenerationModesAgree|TestPrefixCacheMatchesColdRun|TestQwenTokenizer)$' || rc=1
step "voice detection" runtests vad . || rc=1
step "serve and infer" "$root/scripts/arm64-serve-check.sh" "$out/replyd" || rc=1
exit "$rc"
