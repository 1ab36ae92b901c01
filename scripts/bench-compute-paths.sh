#!/bin/bash
# The compute-path table of docs/speech.md in one command: replyd's OpenBLAS
# path with the kernels forced, the ggml graphs on ggml's CPU backend and
# whisper.cpp (built per ../shared/peers/README.md), alternating in each op,
# under the bench lock, at normal priority, with the load before and after.
#
#   scripts/bench-compute-paths.sh [shape regexp] [benchtime]
#       shape: tiny-en, base-en (default) or '' for both; benchtime: 1x (default)
#
# Environment: REPLYD_BENCH_CORETYPE, the OPENBLAS_CORETYPE the BLAS path runs
# with (default SkylakeX, the best kernels on the AVX-512 dev VM; the dev VM's
# environment sets OPENBLAS_CORETYPE=Haswell, so the script always overrides
# it and prints the kernels OpenBLAS reports), REPLYD_BENCH_WHISPER_CPP (whisper.cpp's bin folder,
# default /tmp/whisper.cpp/build/bin; the whisper.cpp columns are left out
# when it is missing), REPLYD_BENCH_MODELS (where the random-weight models
# are written once, default /tmp/replyd-bench-models), REPLYD_TESTDATA.
set -eu
cd "$(dirname "$0")/.."
shape=${1-base-en}
benchtime=${2:-1x}
export OPENBLAS_CORETYPE="${REPLYD_BENCH_CORETYPE:-SkylakeX}"
export REPLYD_BENCH_MODELS="${REPLYD_BENCH_MODELS:-/tmp/replyd-bench-models}"
wcpp="${REPLYD_BENCH_WHISPER_CPP:-/tmp/whisper.cpp/build/bin}"
if [ -x "$wcpp/whisper-cli" ] && [ -x "$wcpp/whisper-bench" ]; then
	export REPLYD_BENCH_WHISPER_CPP="$wcpp"
else
	unset REPLYD_BENCH_WHISPER_CPP
	echo "bench-compute-paths: no whisper.cpp in $wcpp: its columns are left out" >&2
fi
mkdir -p "$REPLYD_BENCH_MODELS"
. scripts/cgo-env.sh
# Build first (at low priority), then time at normal priority.
nice -n 19 go test -c -o /tmp/replyd-bench-whisper.test ./engine/whisper/
pattern="ComputePaths"
[ -n "$shape" ] && pattern="ComputePaths/$shape"
cd engine/whisper
exec flock /tmp/replyd-bench.lock sh -c '
	echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2) ($(nproc) cores; avx512f: $(grep -c -m1 avx512f /proc/cpuinfo), amx: $(grep -c -m1 amx /proc/cpuinfo))"
	echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE whisper.cpp=${REPLYD_BENCH_WHISPER_CPP:-none} commit=$(git rev-parse --short HEAD)"
	echo "loadavg before: $(cat /proc/loadavg)"; date -u
	/tmp/replyd-bench-whisper.test -test.v -test.run "^\$" -test.bench "$1" -test.benchtime "$2"
	echo "loadavg after: $(cat /proc/loadavg)"; date -u
' sh "$pattern" "$benchtime"
