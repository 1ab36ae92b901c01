#!/usr/bin/env bash
# arch-flags.sh [TARGET]: the C/C++ architecture flags replyd's cgo (llama.cpp,
# replyd's Whisper kernels) is built with for TARGET: `native` (the default:
# this machine's CPU, what `make run` builds) or a -march name (x86-64-v3,
# sapphirerapids, ...). Prints one line, e.g.
#   -march=native -mtune=native -mno-amx-bf16 -mno-amx-int8 -mno-amx-tile
#
# AMX is always switched off (docs/performance.md, "CPU targets"): a CPU
# flag is not a usable instruction. With __AMX_INT8__ defined the ollama
# module's ggml-cpu.cpp calls ggml's AMX buffer type, whose sources (the
# ggml-cpu/amx/ subfolder) the module's cgo build never compiles, so the link
# fails; and where it did link, AMX's tile state must first be granted by
# Linux (arch_prctl ARCH_REQ_XCOMP_PERM) and enabled by the hypervisor, or the
# first tile instruction dies with "Illegal instruction". Every other
# extension -march=native turns on, GCC has already checked against what the
# OS enabled (XGETBV), and ggml calls no code outside its compiled sources
# for it.
#
# Which AMX options to switch off is read from the compiler itself
# (`$CC -march=TARGET -Q --help=target`): every -mamx-* it reports enabled,
# so a newer compiler's AMX extensions (amx-fp16, amx-complex, ...) go too.
# ARCH_FLAGS_HELP=FILE reads that listing from FILE instead (the tests).
#
# znver4 is not known to GCC 12 (Debian 12): there it is spelled as znver3
# plus the extensions GCC 13 adds for znver4 (AVX-512 with VNNI and BF16,
# GFNI, VAES, VPCLMULQDQ).
set -euo pipefail

target="${1:-native}"
cc="${CC:-gcc}"

case "$target" in
native) march=(-march=native -mtune=native) ;;
*) march=("-march=$target" -mtune=generic) ;;
esac

if [ -z "${ARCH_FLAGS_HELP:-}" ] && [ "$target" = znver4 ] &&
	! "$cc" -march=znver4 -E -x c /dev/null -o /dev/null 2>/dev/null; then
	march=(-march=znver3 -mavx512f -mavx512dq -mavx512cd -mavx512bw -mavx512vl -mavx512ifma
		-mavx512vbmi -mavx512vbmi2 -mavx512bitalg -mavx512vpopcntdq -mavx512vnni -mavx512bf16
		-mgfni -mvaes -mvpclmulqdq -mtune=generic)
fi

if [ -n "${ARCH_FLAGS_HELP:-}" ]; then
	listing="$(cat "$ARCH_FLAGS_HELP")"
else
	listing="$("$cc" "${march[@]}" -Q --help=target)"
fi

# Lines like "  -mamx-int8      [enabled]".
off=()
while read -r opt state; do
	case "$opt" in
	-mamx-*) [ "$state" = "[enabled]" ] && off+=("-mno-${opt#-m}") ;;
	esac
done <<<"$listing"

if [ "${#off[@]}" -gt 0 ]; then
	mapfile -t off < <(printf '%s\n' "${off[@]}" | sort -u)
fi
echo "${march[*]}${off[*]:+ ${off[*]}}"
