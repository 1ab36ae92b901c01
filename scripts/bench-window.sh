#!/bin/bash
# The encoder-window table of docs/speech.md: `replyd transcribe --no-vad
# --no-fallback --threads 1 --json` on one model file and a set of clips,
# the window modes alternated clip by clip in each round, under the bench
# lock, at normal priority; prints every run and the medians of the
# encoder's time and of Whisper's whole time (mel + encoder + decoder).
#
#   scripts/bench-window.sh MODEL ROUNDS CLIP... 
#
# Environment: REPLYD_BIN (default bin/replyd), REPLYD_BENCH_MODES (default
# "speech full"), REPLYD_BENCH_CORETYPE (OPENBLAS_CORETYPE, default SkylakeX
# as scripts/bench-compute-paths.sh). The base.en q8_0 shape comes from
# `replyd models synth --shape base.en --type q8_0`; the 4.3 s question of
# ../shared/peers/README.md from espeak-ng -v en-us -s 150 and sox.
set -eu
model=$1 rounds=$2
shift 2
bin="${REPLYD_BIN:-bin/replyd}"
modes="${REPLYD_BENCH_MODES:-speech full}"
export OPENBLAS_CORETYPE="${REPLYD_BENCH_CORETYPE:-SkylakeX}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
exec 9>/tmp/replyd-bench.lock
flock 9
echo "cpu: $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2) ($(nproc) cores) OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
echo "loadavg before: $(cat /proc/loadavg)"
for _ in $(seq "$rounds"); do
	for clip in "$@"; do
		for mode in $modes; do
			"$bin" transcribe --model "$model" --no-vad --no-fallback --threads 1 --json --window "$mode" "$clip" 2>/dev/null |
				python3 -c 'import json,sys; v=json.load(sys.stdin); t=v["timings_ms"]
print(sys.argv[1], sys.argv[2], v["audio_ctx"], len(v["tokens"]), t["mel"], t["encoder"], t["decoder"], t["mel"]+t["encoder"]+t["decoder"])' \
					"$(basename "$clip")" "$mode" | tee -a "$out"
		done
	done
done
echo "loadavg after: $(cat /proc/loadavg)"
python3 - "$out" <<'PY'
import statistics, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    clip, mode, ctx, tok, mel, enc, dec, whole = line.split()
    rows[(clip, mode)].append((int(ctx), int(tok), float(enc), float(whole)))
clips = sorted({c for c, _ in rows})
print("| clip | mode | audio_ctx | tokens | encoder ms (median) | Whisper ms (median) | encoder vs full |")
print("|---|---|---|---|---|---|---|")
for clip in clips:
    full = statistics.median(r[2] for r in rows.get((clip, "full"), [(0, 0, float("nan"), 0)]))
    for (c, mode), rs in sorted(rows.items()):
        if c != clip:
            continue
        enc = statistics.median(r[2] for r in rs)
        whole = statistics.median(r[3] for r in rs)
        print(f"| {clip} | {mode} | {rs[0][0]} | {rs[0][1]} | {enc:.0f} ({min(r[2] for r in rs):.0f}-{max(r[2] for r in rs):.0f}) | {whole:.0f} | {enc/full:.2f}x |")
PY
