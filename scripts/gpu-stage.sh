#!/usr/bin/env bash
# gpu-stage.sh DIR: fills DIR (default .gpu, which .git/info/exclude should
# ignore) with what scripts/gpu-check.sh needs on a GPU machine that has no Go
# toolchain and no network, in under 64 MiB: replyd (the portable build) and
# cmd/benchlatency, the ollama module's CMake files and ggml sources, the
# shared libraries replyd links that a CUDA image may lack (OpenBLAS and its
# Fortran runtime), Qwen's tokenizer.json (for `replyd models synth`), the
# partner's clip and Silero VAD, and the check script itself. Large files are
# xz-compressed. Run it from a checkout where `make build` works; the cgo
# flags are the Makefile's (REPLYD_CGO_INCLUDE as there).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="${1:-$root/.gpu}"
mkdir -p "$stage"
stage="$(cd "$stage" && pwd)"
cd "$root"

make build REPLYD_CGO_INCLUDE="${REPLYD_CGO_INCLUDE:-$root/engine/llm/include}" >&2
export REPLYD_CGO_INCLUDE="${REPLYD_CGO_INCLUDE:-$root/engine/llm/include}"
# shellcheck source=cgo-env.sh disable=SC1091
source "$root/scripts/cgo-env.sh"
go build -trimpath -o bin/benchlatency ./cmd/benchlatency

tok="${REPLYD_QWEN_TOKENIZER:-$root/models/qwen-tokenizer.json}"
vad="${REPLYD_VAD_MODEL:-$root/models/silero_vad_v5.onnx}"
jfk="${REPLYD_TESTDATA:-$root/../shared/testdata}/whisper/audio/jfk.wav"
for f in "$tok" "$vad" "$jfk"; do
	[ -f "$f" ] || { echo "gpu-stage: $f is missing (scripts/qwen-tokenizer.sh, scripts/vad-model.sh, the shared test data)" >&2; exit 1; }
done

rm -rf "${stage:?}/bin" "${stage:?}/syslib"
mkdir -p "$stage/bin" "$stage/syslib"
xz -T0 -6 -c bin/replyd >"$stage/bin/replyd.xz"
xz -T0 -6 -c bin/benchlatency >"$stage/bin/benchlatency.xz"
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0; do
	p="$(ldd bin/replyd | awk -v l="$lib" '$1 == l {print $3}')"
	[ -n "$p" ] || { echo "gpu-stage: replyd does not link $lib" >&2; exit 1; }
	xz -T0 -6 -c "$(readlink -f "$p")" >"$stage/syslib/$lib.xz"
done
xz -T0 -6 -c "$tok" >"$stage/qwen-tokenizer.json.xz"
cp "$vad" "$jfk" "$stage/"
# Two of the Whisper conformance models and clips, for gpu-check.sh's speech
# step (transcript tokens on the GPU against the CPU).
conf="$(dirname "$(dirname "$jfk")")"
rm -rf "${stage:?}/conformance"
mkdir -p "$stage/conformance"
cp "$conf/models/rand-w64-en-q8_0.bin" "$conf/models/rand-w64-ml-q5_0.bin" "$conf/audio/speech-en-us.wav" \
	"$conf/audio/silence-2s.wav" "$stage/conformance/"

# ollama's top-level CMakeLists.txt and presets, and ggml (the CUDA target
# needs ggml-base and the CPU backend's CMake files to configure; Metal,
# Vulkan are left out).
mod="$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)"
tar -C "$mod" --exclude='ml/backend/ggml/ggml/src/ggml-metal' --exclude='ml/backend/ggml/ggml/src/ggml-vulkan' \
	--exclude='*.go' -cJf "$stage/ollama-ggml.tar.xz" CMakeLists.txt CMakePresets.json ml/backend/ggml/ggml
cp scripts/gpu-check.sh "$stage/"
du -sh "$stage" >&2
ls -la "$stage" "$stage/bin" "$stage/syslib" >&2
