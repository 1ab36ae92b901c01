#!/bin/sh
# arm64-guest-tests.sh: the steps of `make test-arm64`, run by busybox sh
# inside the emulated Cortex-A76 machine (scripts/arm64-vm.sh boots it;
# scripts/test-arm64.sh builds what it runs and reads what it reports).
# The checkout is the read-only share /mnt/repo (the test binaries in
# bin/arm64, each run in its package's folder, as go test does), the shared
# test data /mnt/shared, and /mnt/out is writable: env holds the host's
# settings, hosttool the host's records of espeak-ng, sox and node
# (scripts/arm64-hosttool.sh). Each step prints one line
#   ARM64-STEP <name>: ok in <s> s     or     ARM64-STEP <name>: FAILED (<rc>) in <s> s
# on the console and appends it to /mnt/out/steps; the exit status is 1 when
# a step failed.
set -u
# shellcheck source=/dev/null
. /mnt/out/env
repo=/mnt/repo
bin=$repo/bin/arm64
export REPLYD_TESTDATA=/mnt/shared REPLYD_SKIP_LOG=/mnt/out/skipped
# OpenBLAS with the guest's two cores as its threads.
export OPENBLAS_NUM_THREADS=2
: >/mnt/out/steps

step() { # step NAME COMMAND...
	name="$1"
	shift
	start=$(date +%s)
	rc=0
	"$@" || rc=$?
	if [ "$rc" -eq 0 ]; then res=ok; else res="FAILED ($rc)"; fi
	line="ARM64-STEP $name: $res in $(($(date +%s) - start)) s"
	echo "$line"
	echo "$line" >>/mnt/out/steps
	return "$rc"
}

# shellcheck disable=SC2317 # called through step
runtests() { # runtests PKG PATTERN
	(cd "$repo/engine/$1" && "$bin/$1.test" -test.count=1 -test.timeout 120m -test.v -test.run "$2")
}

# shellcheck disable=SC2317 # called through step
kernels() { # the kernels chosen, as replyd prints them (`replyd kernels`)
	grep -m1 Features /proc/cpuinfo
	"$bin/replyd" kernels
}

# espeak-ng, sox and node stand-ins that replay the host's runs.
mkdir -p /tmp/hostbin
for t in espeak-ng sox soxi node; do ln -s "$repo/scripts/arm64-hosttool.sh" "/tmp/hostbin/$t"; done
export ARM64_HOSTTOOL_MODE=replay ARM64_HOSTTOOL_DIR=/mnt/out/hosttool

rc=0
for s in $ARM64_STEPS; do
	case "$s" in
	kernels) step "kernels chosen" kernels || rc=1 ;;
	whisper-kernels) step "whisper kernels" runtests whisper "$ARM64_WHISPER_KERNELS" || rc=1 ;;
	whisper-conformance) step "whisper conformance" runtests whisper "$ARM64_CONFORMANCE" || rc=1 ;;
	llm) step "language model" runtests llm "$ARM64_LLM_TESTS" || rc=1 ;;
	vad) PATH=/tmp/hostbin:$PATH step "voice detection" runtests vad . || rc=1 ;;
	serve) step "serve and infer" sh "$repo/scripts/arm64-serve-check.sh" "$bin/replyd" || rc=1 ;;
	*) echo "ARM64-STEP $s: FAILED (unknown step)"; rc=1 ;;
	esac
done
exit "$rc"
