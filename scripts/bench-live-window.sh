#!/usr/bin/env bash
# bench-live-window.sh: issue 40's browser measurement. `make bench-live`
# (tests/browser/livelatency.mjs, real lengths) run ROUNDS times for each of
# two encoder-window modes, alternately (speech then full, then full then
# speech, ...), LIVE_TURNS measured turns a path each, with the temperature
# fallback off (random weights fail its every test, so with it on the turns
# would be decoded at every temperature); then the medians of every turn of
# each mode, path by path, and one run more in the first mode with the
# fallback on, which prints how often the shortened window's safety net
# fired (replyd_whisper_windows_total). Each run takes the lock
# /tmp/replyd-bench.lock, as the other benchmark runs on this box do. It
# prints figures; it asserts nothing. The box's load is printed with each run: other work on it shows
# in the figures.
#
# Usage: scripts/bench-live-window.sh [OUT_DIR]
# Environment: ROUNDS (default 3), LIVE_TURNS (default 2), MODES (default
# "speech full"), NET_RUN (default 1: the fallback-on run; 0 skips it),
# PATHS and REPLYD_MAX_REPLY_TOKENS (passed to livelatency.mjs: on a box
# loaded by other work, PATHS=listen measures only the Listen path).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/tests/browser/artifacts/livewindow}
rounds=${ROUNDS:-3}
turns=${LIVE_TURNS:-2}
read -r -a modes <<<"${MODES:-speech full}"
[ "${#modes[@]}" -eq 2 ] || { echo "bench-live-window: MODES must name two modes" >&2; exit 1; }
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log

run() { # mode fallback tag
	local mode=$1 fb=$2 tag=$3
	echo "== $tag: REPLYD_WHISPER_WINDOW=$mode REPLYD_WHISPER_FALLBACK=$fb, load $(cut -d' ' -f1-3 /proc/loadavg)"
	# One benchmark on the box at a time (the lock the other bench runs take).
	if (cd "$root" && REPLYD_WHISPER_WINDOW=$mode REPLYD_WHISPER_FALLBACK=$fb flock /tmp/replyd-bench.lock make -s bench-live LIVE_TURNS="$turns" ${REPLYD_MAX_REPLY_TOKENS:+REAL_REPLY_ENV=REPLYD_MAX_REPLY_TOKENS=$REPLYD_MAX_REPLY_TOKENS}) >"$out/$tag.log" 2>&1; then
		cp "$root/tests/browser/artifacts/livelatency/results.json" "$out/$tag.json"
	else
		echo "   failed: see $out/$tag.log"
	fi
	grep -E '^(medians|stage|transcript shown|candidates shown|first caption|caption >= 1 s|Whisper \(ms\)|replyd_whisper_windows_total)' "$out/$tag.log" | sed 's/^/   /' || true
}

for ((i = 1; i <= rounds; i++)); do
	if ((i % 2)); then order=("${modes[0]}" "${modes[1]}"); else order=("${modes[1]}" "${modes[0]}"); fi
	for m in "${order[@]}"; do run "$m" off "$m-$i"; done
done
if [ "${NET_RUN:-1}" = 1 ]; then run "${modes[0]}" on "${modes[0]}-fallback-on"; fi

# The medians over every run's turns, per mode and path.
node - "$out" "${modes[@]}" <<'EOF'
const fs = require('fs');
const path = require('path');
const [dir, ...modes] = process.argv.slice(2);
const median = (v) => {
  const s = v.filter(Number.isFinite).sort((a, b) => a - b);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => (Number.isFinite(x) ? String(Math.round(x)) : '-');
const rows = [['transcript shown', 'transcript'], ['candidates shown', 'candidates'], ['first caption (start)', 'caption'],
  ['caption >= 1 s (start)', 'caption1s'], ['Whisper (ms)', 'whisper'], ['tokens decoded', 'decoded']];
for (const mode of modes) {
  const runs = fs.readdirSync(dir).filter((f) => new RegExp(`^${mode}-\\d+\\.json$`).test(f)).map((f) => JSON.parse(fs.readFileSync(path.join(dir, f))));
  if (!runs.length) { console.log(`${mode}: no run finished`); continue; }
  const kinds = Object.keys(runs[0].results);
  const all = Object.fromEntries(kinds.map((k) => [k, runs.flatMap((r) => r.results[k] || [])]));
  console.log(`\n${mode}, fallback off: medians of ${kinds.map((k) => `${all[k].length} ${k}`).join(', ')} turns over ${runs.length} runs (ms; loads at the runs' ends ${runs.map((r) => r.load).join(' | ')})`);
  console.log(`${'stage'.padEnd(24)} ${kinds.map((k) => k.padStart(10)).join(' ')}`);
  for (const [label, key] of rows) console.log(`${label.padEnd(24)} ${kinds.map((k) => fmt(median(all[k].map((r) => r[key]))).padStart(10)).join(' ')}`);
}
EOF
