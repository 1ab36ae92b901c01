#!/usr/bin/env bash
# test-arm64.sh: builds replyd and its engine tests for linux/arm64
# (scripts/arm64-env.sh) and runs them inside a whole emulated arm64
# machine, a Cortex-A76 (the Raspberry Pi 5's core) with 2 cores and OpenBLAS
# on 2 threads, booted by scripts/arm64-vm.sh. What runs there
# (scripts/arm64-guest-tests.sh), the steps of ARM64_STEPS (default all):
#   kernels              the kernels chosen (`replyd kernels`: OpenBLAS's
#                        core, ggml's CPU features) and the CPU's features
#   whisper-kernels      replyd's Whisper kernels against the scalar and Go
#                        references
#   whisper-conformance  Whisper against whisper.cpp's tokens on the shared
#                        data ($REPLYD_TESTDATA or ../shared/testdata);
#                        ARM64_CONFORMANCE is the -test.run pattern (default
#                        every ^TestConformance test): CI narrows it
#   llm                  the language model on the demo model and on a model
#                        with Qwen2.5's vocabulary
#   vad                  Silero VAD, all of engine/vad's tests: their speech
#                        (espeak-ng, sox) and ONNX Runtime's reference (node)
#                        are the host's, recorded by running the same tests
#                        on the host first (scripts/arm64-hosttool.sh)
#   serve                bin/arm64/replyd serving the demo models and
#                        answering /v1/infer with text and with speech
#                        (scripts/arm64-serve-check.sh, inside the guest)
# Each build and step prints its wall time; the guest's console is kept in
# bin/arm64/vm/console.log. ARM64_VM_TIMEOUT (default 7200 s) bounds the
# guest: a hung one is killed and fails the run. `make test-arm64` runs it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
steps="${ARM64_STEPS:-kernels whisper-kernels whisper-conformance llm vad serve}"
for t in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++ qemu-system-aarch64 cpio; do
	command -v "$t" >/dev/null || { echo "test-arm64: $t is missing: scripts/deps.sh arm64 installs it" >&2; exit 2; }
done
[ -e /usr/lib/aarch64-linux-gnu/libopenblas.so ] ||
	{ echo "test-arm64: the arm64 OpenBLAS is missing: scripts/deps.sh arm64 installs libopenblas-dev:arm64" >&2; exit 2; }
testdata="${REPLYD_TESTDATA:-$(dirname "$root")/shared/testdata}"
if [ ! -d "$testdata/whisper" ]; then
	[ "${REPLYD_REQUIRE_TESTDATA:-}" = 1 ] && { echo "test-arm64: no shared test data at $testdata" >&2; exit 1; }
	echo "test-arm64: SHARED TEST DATA NOT FOUND at $testdata: the conformance tests will skip" >&2
	testdata="$(mktemp -d)"
fi
out="$root/bin/arm64"
vm="$out/vm"
mkdir -p "$out"
rm -rf "$vm"
mkdir -p "$vm"

step() { # step NAME COMMAND...: runs COMMAND, printing its time
	local name="$1" start rc=0
	shift
	start=$(date +%s)
	"$@" || rc=$?
	echo "test-arm64: $name: $([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)") in $(($(date +%s) - start)) s" >&2
	return "$rc"
}
# shellcheck disable=SC2317 # called through step
# shellcheck source=/dev/null
cross() { (source "$root/scripts/arm64-env.sh" && nice -n 10 go "$@"); }

# Only what the steps run is built (CI runs a few of them).
has() { case " $steps " in *" $1 "*) return 0 ;; esac; return 1; }
libs=()
if has kernels || has serve; then
	step "build bin/arm64/replyd" cross build -o "$out/replyd" ./cmd/replyd
	libs+=(--libs-for "$out/replyd")
fi
for pkg in whisper llm vad; do
	case "$pkg" in
	whisper) has whisper-kernels || has whisper-conformance || continue ;;
	*) has "$pkg" || continue ;;
	esac
	step "build the $pkg tests" cross test -c -o "$out/$pkg.test" "./engine/$pkg/"
	libs+=(--libs-for "$out/$pkg.test")
done

# The host's espeak-ng, sox and ONNX Runtime calls of engine/vad's tests,
# kept for the guest to replay: the same tests, run here first.
# shellcheck disable=SC2317 # called through step
record_hosttools() {
	local shim="$vm/hostbin"
	mkdir -p "$shim"
	for t in espeak-ng sox soxi node; do ln -sf "$root/scripts/arm64-hosttool.sh" "$shim/$t"; done
	PATH="$shim:$PATH" ARM64_HOSTTOOL_MODE=record ARM64_HOSTTOOL_DIR="$vm/hosttool" \
		nice -n 5 go test -count=1 ./engine/vad/
}
if has vad; then step "voice detection on the host (the guest's speech and reference)" record_hosttools; fi

cat >"$vm/env" <<EOF
ARM64_STEPS='$steps'
ARM64_WHISPER_KERNELS='${ARM64_WHISPER_KERNELS:-^(TestDequantMatchesReference|TestF16Conversion|TestLinearPaths|TestSoftmaxGeluAttention|TestAttentionF16|TestLinearsShareInput|TestFFTMatchesDFT)\$}'
ARM64_CONFORMANCE='${ARM64_CONFORMANCE:-^TestConformance}'
ARM64_LLM_TESTS='${ARM64_LLM_TESTS:-^(TestWriteDemoModel|TestQuantizedModel|TestGenerateDistinctCandidates|TestGenerateRepeatableWithSeed|TestGenerationModesAgree|TestPrefixCacheMatchesColdRun|TestQwenTokenizer)\$}'
export REPLYD_REQUIRE_TESTDATA='${REPLYD_REQUIRE_TESTDATA:-}'
EOF

rc=0
step "emulated Cortex-A76 machine (boot, steps, power-off)" "$root/scripts/arm64-vm.sh" --timeout "${ARM64_VM_TIMEOUT:-7200}" \
	--share "repo=$root" --share "shared=$testdata" \
	"${libs[@]}" \
	--out "$vm" "$root/scripts/arm64-guest-tests.sh" >&2 || rc=$?
echo "test-arm64: in the guest:" >&2
sed 's/^ARM64-STEP /test-arm64:   /' "$vm/steps" >&2 2>/dev/null || true
done_steps="$(wc -l <"$vm/steps" 2>/dev/null || echo 0)"
want_steps="$(echo "$steps" | wc -w)"
if [ "$done_steps" -ne "$want_steps" ]; then
	echo "test-arm64:   $done_steps of the $want_steps steps finished" >&2
	[ "$rc" -ne 0 ] || rc=1
fi
if [ -s "$vm/skipped" ]; then
	echo "test-arm64: skipped in the guest: $(sort -u "$vm/skipped" | tr '\n' ' ')" >&2
fi
if [ "$rc" -ne 0 ]; then
	echo "test-arm64: FAILED ($rc); the guest's console: $vm/console.log" >&2
	grep -E -- '^(--- FAIL|FAIL|panic|arm64|ARM64)' "$vm/console.log" | tail -40 >&2 || true
fi
exit "$rc"
