# Source this file to get the cgo flags replyd is built with (the Makefile
# exports the same values). Keep them identical everywhere: the Go build cache
# is keyed on them, and llama.cpp takes minutes to rebuild.
_replyd_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export CGO_ENABLED=1
# On an arm64 box: the ARMv8.2-A baseline of scripts/arm64-env.sh.
_replyd_arch="-march=x86-64-v3 -mtune=generic"
if [ "$(uname -m)" = aarch64 ]; then _replyd_arch="-march=armv8.2-a+fp16+dotprod"; fi
export CGO_CFLAGS="-O3 $_replyd_arch"
export CGO_CXXFLAGS="-O3 $_replyd_arch"
unset _replyd_arch
# engine/llm/include holds replyd's stand-in for miniaudio.h (see the header).
# REPLYD_CGO_INCLUDE may name the same folder in another checkout, so that
# checkouts share one build cache (the include path is part of its key).
export CGO_CPPFLAGS="-I${REPLYD_CGO_INCLUDE:-${_replyd_root}/engine/llm/include}"
unset _replyd_root
