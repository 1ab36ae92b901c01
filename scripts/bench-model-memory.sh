#!/usr/bin/env bash
# bench-model-memory.sh: how much memory a model loaded beside the active one
# really takes, against what replyd reserves for it before loading (docs/models.md:
# the file's size, a quarter more and 64 MiB, checked against MemAvailable).
#
#   scripts/bench-model-memory.sh [BIN] [SYNTH_DIR]
#
# BIN defaults to bin/replyd, SYNTH_DIR to ~/.cache/replyd/synth (`make bench-latency`
# writes it: `replyd models synth`). It starts BIN on those models, copies each
# model into the data directory's models folder under another name, and times the
# copy (POST /v1/admin/models/{name}/time: loaded beside the active model, run,
# freed). The process's peak resident memory is reset before (clear_refs 5) and
# read after (VmHWM): the peak above the resident memory before is what the
# model took beside the other, to compare with the answer's bytes_needed.
set -euo pipefail

bin=${1:-bin/replyd}
synth=${2:-$HOME/.cache/replyd/synth}
llm=$synth/synth-qwen2.5-0.5b-q8_0.gguf
stt=$synth/synth-base.en-q8_0.bin
for f in "$bin" "$llm" "$stt"; do
	[[ -f $f ]] || { echo "bench-model-memory: $f is missing (make build; make bench-latency writes the synth models)" >&2; exit 2; }
done

tmp=$(mktemp -d)
pid=
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/data/models"
cp "$llm" "$tmp/data/models/candidate.gguf"
cp "$stt" "$tmp/data/models/candidate.bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=bench-memory-$RANDOM$RANDOM$RANDOM$RANDOM
REPLYD_ADDR=127.0.0.1:$port REPLYD_DATA_DIR=$tmp/data REPLYD_ADMIN_KEY=$key \
	REPLYD_LLM_MODEL=$llm REPLYD_WHISPER_MODEL=$stt REPLYD_MAX_REPLY_TOKENS=12 \
	"$bin" serve >"$tmp/replyd.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
	curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/replyd.log" >&2; exit 1; }
	sleep 0.5
done

kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$pid/status"; }
mib() { awk -v b="$1" 'BEGIN {printf "%.0f", b / 1048576}'; }

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores; MemAvailable $(awk '/MemAvailable/ {printf "%.0f MiB", $2/1024}' /proc/meminfo)"
printf '%-15s %10s %14s %14s %10s\n' model "file MiB" "reserved MiB" "peak MiB" peak/reserved
for name in candidate.gguf candidate.bin; do
	before=$(kib VmRSS)
	echo 5 >"/proc/$pid/clear_refs"
	answer=$(curl -fsS -X POST -H "X-ADMIN-KEY: $key" "http://127.0.0.1:$port/v1/admin/models/$name/time")
	hwm=$(kib VmHWM)
	needed=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_needed"])' <<<"$answer")
	size=$(stat -c %s "$tmp/data/models/$name")
	peak=$(((hwm - before) * 1024))
	printf '%-15s %10s %14s %14s %10s\n' "$name" "$(mib "$size")" "$(mib "$needed")" "$(mib "$peak")" \
		"$(awk -v p="$peak" -v n="$needed" 'BEGIN {printf "%.2f", p / n}')"
done
