#!/bin/bash
# Times a comparison (POST /v1/admin/models/{name}/compare) on this box:
# starts bin/replyd on MODEL in a scratch data directory, records N turns
# of remembering users (each spoke the first candidate), compares CANDIDATE
# (default: a byte copy of MODEL, so that both sides must give the same
# figures) on them, and prints the load average before and after, the wall
# time and the comparison. Run it under the bench lock:
#   flock /tmp/replyd-bench.lock scripts/bench-compare.sh MODEL.gguf [CANDIDATE.gguf]
# Environment: N (turns, default 8), REPLYD_BIN (default bin/replyd),
# PORT (default 18431).
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 MODEL.gguf [CANDIDATE.gguf]" >&2
  exit 2
fi
N=${N:-8}
BIN=${REPLYD_BIN:-bin/replyd}
PORT=${PORT:-18431}
D=$(mktemp -d)
mkdir -p "$D/models"
cp "$1" "$D/models/active.gguf"
cp "${2:-$1}" "$D/models/candidate.gguf"
"$BIN" models demo --dir "$D/demo" >/dev/null
ADMIN=bench-admin-key-0123456789abcdef
REPLYD_DATA_DIR=$D REPLYD_ADMIN_KEY=$ADMIN REPLYD_ADDR=127.0.0.1:$PORT REPLYD_TLS=off \
REPLYD_LLM_MODEL=$D/models/active.gguf REPLYD_WHISPER_MODEL=$D/demo/whisper-demo.bin \
  "$BIN" serve >"$D/replyd.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; rm -rf "$D"' EXIT
U=http://127.0.0.1:$PORT
for _ in $(seq 600); do
  if curl -sf "$U/healthz" | grep -q '"status":"ok"'; then break; fi
  sleep 1
done
KEY=$(curl -sf -X POST "$U/v1/admin/keys" -H "X-ADMIN-KEY: $ADMIN" -H 'Content-Type: application/json' \
  -d '{"client_id":"bench"}' | sed 's/.*"api_key":"\([^"]*\)".*/\1/')
lines=("Shall we go out later?" "Do you want tea or coffee?" "How did you sleep?" "What would you like for lunch?"
  "Is the room too warm for you?" "Shall I call your sister tonight?" "Do you want to watch the match?"
  "Are you comfortable in that chair?" "Would you like some music on?" "Did you enjoy the visit today?")
for i in $(seq 0 $((N - 1))); do
  p=$(printf '{"remember":true,"user_id":"u%d","messages":[{"role":"speaker","content":"%s"}]}' "$i" "${lines[$((i % 10))]}")
  id=$(curl -sf "$U/v1/infer" -H "X-API-KEY: $KEY" -F "payload=$p;type=application/json" |
    sed 's/.*"inference_id":"\([^"]*\)".*/\1/')
  curl -sf "$U/v1/feedback" -H "X-API-KEY: $KEY" -H 'Content-Type: application/json' \
    -d "{\"inference_id\":\"$id\",\"chosen_rank\":1}" >/dev/null
done
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
echo "loadavg before: $(cat /proc/loadavg)"
t0=$(date +%s.%N)
curl -sf -X POST "$U/v1/admin/models/candidate.gguf/compare" -H "X-ADMIN-KEY: $ADMIN" \
  -H 'Content-Type: application/json' -d "{\"turns\":$N}" >/dev/null
while :; do
  r=$(curl -sf "$U/v1/admin/models/candidate.gguf/compare" -H "X-ADMIN-KEY: $ADMIN")
  if ! grep -q '"state":"running"' <<<"$r"; then break; fi
  sleep 1
done
t1=$(date +%s.%N)
echo "loadavg after: $(cat /proc/loadavg)"
echo "wall: $(echo "$t1 - $t0" | bc) s"
echo "$r"
