# Source this file to cross-build replyd for linux/arm64 (make build-arm64,
# make test-arm64): Debian's cross compilers (gcc-aarch64-linux-gnu,
# g++-aarch64-linux-gnu) and the arm64 OpenBLAS of Debian's multiarch
# (libopenblas-dev:arm64; scripts/deps.sh arm64 installs them). The flags
# are the ARMv8.2-A baseline with half-precision arithmetic and the int8 dot
# product, which the Raspberry Pi 5 (Cortex-A76) and the Jetson Orin
# (Cortex-A78AE) have and ggml's q8_0 kernels use (docs/operations.md). The
# build gets its own Go build cache: llama.cpp takes minutes to compile.
_replyd_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export GOOS=linux GOARCH=arm64 CGO_ENABLED=1
export CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++
export CGO_CFLAGS="-O3 ${ARM64_ARCH:--march=armv8.2-a+fp16+dotprod}"
export CGO_CXXFLAGS="$CGO_CFLAGS"
export CGO_CPPFLAGS="-I${REPLYD_CGO_INCLUDE:-${_replyd_root}/engine/llm/include}"
export GOCACHE="${ARM64_GOCACHE:-$HOME/.cache/replyd/arch-cache/arm64}"
unset _replyd_root
