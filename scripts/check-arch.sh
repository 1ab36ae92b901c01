#!/usr/bin/env bash
# check-arch.sh [TARGET...]: replyd's C and C++ sources (llama.cpp through the
# ollama module, replyd's Whisper kernels) compile and bin/replyd links for
# each x86-64 target, with the flags scripts/arch-flags.sh gives it (what
# `make run` uses for the CPU it runs on). `make check-arch` runs it; run it
# whenever the build flags, the cgo code or the ollama module change
# (docs/development.md). Compile and link only: nothing built is run.
#
# Each target is a llama.cpp rebuild (about 4 minutes on 2 cores) into its own
# Go build cache, ~/.cache/replyd/arch-cache/TARGET, so a rerun after a change
# elsewhere is quick; targets build one after another, under nice.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 2
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
	targets=(x86-64-v2 x86-64-v3 x86-64-v4 sapphirerapids znver4 alderlake)
fi
cache="${ARCH_CACHE:-$HOME/.cache/replyd/arch-cache}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export CGO_ENABLED=1
export CGO_CPPFLAGS="-I${REPLYD_CGO_INCLUDE:-$root/engine/llm/include}"

passed=()
failed=()
for t in "${targets[@]}"; do
	flags="$("$root/scripts/arch-flags.sh" "$t")" || { failed+=("$t"); continue; }
	echo "== $t: $flags" >&2
	start=$(date +%s)
	mkdir -p "$cache/$t"
	if GOCACHE="$cache/$t" CGO_CFLAGS="-O3 $flags" CGO_CXXFLAGS="-O3 $flags" \
		nice -n 10 go build -o "$out/replyd-$t" ./cmd/replyd; then
		echo "== $t: built and linked in $(($(date +%s) - start)) s" >&2
		passed+=("$t")
	else
		echo "== $t: FAILED after $(($(date +%s) - start)) s" >&2
		failed+=("$t")
	fi
	rm -f "$out/replyd-$t"
done

echo "check-arch: passed: ${passed[*]:-none}; failed: ${failed[*]:-none}"
[ "${#failed[@]}" -eq 0 ]
