#!/bin/sh
# arm64-hosttool.sh: stands in for a host tool (espeak-ng, sox, soxi, node)
# that a test runs, so that engine/vad's tests, which make their speech with
# espeak-ng and sox and compute their reference with ONNX Runtime in node,
# run unchanged in the emulated arm64 machine, which has none of them
# (scripts/test-arm64.sh). Installed under the tool's name (a symlink) in a
# folder put first on PATH; POSIX sh, for the host's sh and the guest's
# busybox alike.
#
#   ARM64_HOSTTOOL_MODE=record  runs the real tool (the next one on PATH) and
#                               keeps its standard output, exit status and
#                               the files it wrote in $ARM64_HOSTTOOL_DIR
#   ARM64_HOSTTOOL_MODE=replay  writes back what the host's run kept for the
#                               same call; a call the host never made fails
#
# A call is named by the tool and its arguments, where an argument naming an
# existing file stands for that file's SHA-256 (temporary folders differ
# from run to run, contents do not) and one naming a file that does not
# exist yet is an output. The guest replays the host's bytes exactly, so a
# test that feeds them to arm64 code compares arm64 against the host's
# ONNX Runtime, as it does on x86.
set -eu
tool="$(basename "$0")"
store="${ARM64_HOSTTOOL_DIR:?ARM64_HOSTTOOL_DIR is not set}"
mode="${ARM64_HOSTTOOL_MODE:?ARM64_HOSTTOOL_MODE is not set}"

desc="$tool"
outs=""
for a in "$@"; do
	case "$a" in
	*/*)
		if [ -f "$a" ]; then
			a="in:$(sha256sum <"$a" | cut -d' ' -f1)"
		else
			outs="$outs $a"
			a="out"
		fi
		;;
	esac
	desc="$desc
$a"
done
key="$(printf '%s\n' "$desc" | sha256sum | cut -d' ' -f1)"
rec="$store/$tool-$key"

# A call made again while recording answers what was kept the first time:
# sox dithers at random unless told -R, so the same call can write other
# bytes, and the calls after it are named by the bytes of the first.
if [ "$mode" = record ] && [ -d "$rec" ]; then mode=replay; fi
case "$mode" in
record)
	self="$(cd "$(dirname "$0")" && pwd)"
	real=""
	IFS=:
	for d in $PATH; do
		[ "$(cd "$d" 2>/dev/null && pwd)" = "$self" ] && continue
		if [ -x "$d/$tool" ]; then real="$d/$tool"; break; fi
	done
	unset IFS
	[ -n "$real" ] || { echo "arm64-hosttool: $tool is not installed on the host" >&2; exit 127; }
	mkdir -p "$store"
	rm -rf "$rec.tmp"
	mkdir "$rec.tmp"
	rc=0
	"$real" "$@" >"$rec.tmp/stdout" || rc=$?
	echo "$rc" >"$rec.tmp/rc"
	printf '%s\n' "$desc" >"$rec.tmp/call"
	i=0
	for o in $outs; do
		if [ -f "$o" ]; then cp "$o" "$rec.tmp/out$i"; fi
		i=$((i + 1))
	done
	rm -rf "$rec"
	mv "$rec.tmp" "$rec"
	cat "$rec/stdout"
	exit "$rc"
	;;
replay)
	[ -d "$rec" ] || {
		echo "arm64-hosttool: the host never ran this $tool call (its record $rec is missing): $*" >&2
		printf '%s\n' "$desc" | sed 's/^/arm64-hosttool:   /' >&2
		exit 127
	}
	i=0
	for o in $outs; do
		if [ -f "$rec/out$i" ]; then cp "$rec/out$i" "$o"; fi
		i=$((i + 1))
	done
	cat "$rec/stdout"
	exit "$(cat "$rec/rc")"
	;;
*)
	echo "arm64-hosttool: ARM64_HOSTTOOL_MODE is record or replay, not $mode" >&2
	exit 2
	;;
esac
