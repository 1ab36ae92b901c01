#!/usr/bin/env bash
# arm64-serve-check.sh BIN: a short serve-and-infer run of an arm64 replyd
# under qemu-user (scripts/test-arm64.sh): it writes the demo models, serves
# them on a free loopback port, creates an API key and asks /v1/infer once
# with text and once with speech (a second of espeak-ng, or of a tone when
# espeak-ng is missing), and checks that both answer replies.
set -euo pipefail
bin="$1"
qemu=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)
tmp="$(mktemp -d)"
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

"${qemu[@]}" "$bin" models demo --dir "$tmp/models" >/dev/null
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
admin="arm64-check-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
REPLYD_DATA_DIR="$tmp/data" REPLYD_ADMIN_KEY="$admin" REPLYD_TLS=off REPLYD_OTP_CHANNEL=console \
	REPLYD_ADDR="127.0.0.1:$port" REPLYD_LLM_MODEL="$tmp/models/llm-demo.gguf" \
	REPLYD_WHISPER_MODEL="$tmp/models/whisper-demo.bin" "${qemu[@]}" "$bin" serve >"$tmp/serve.log" 2>&1 &
pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 1 300); do
	curl -fsS "$url/healthz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; echo "arm64 serve: replyd exited" >&2; exit 1; }
	sleep 1
done
curl -fsS "$url/healthz" >/dev/null || { tail -20 "$tmp/serve.log" >&2; echo "arm64 serve: not ready after 300 s" >&2; exit 1; }

key="$(curl -fsS -H "X-ADMIN-KEY: $admin" -H 'Content-Type: application/json' \
	-d '{"client_id":"arm64-check","rate_limit_per_minute":1000}' "$url/v1/admin/keys" |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])')"

printf '%s' '{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"options":{"max_candidates":2}}' >"$tmp/text.json"
printf '%s' '{"messages":[],"options":{"max_candidates":2}}' >"$tmp/speech.json"
if command -v espeak-ng >/dev/null; then
	espeak-ng -v en-us -w "$tmp/speech.wav" "Would you like some tea?"
else
	python3 - "$tmp/speech.wav" <<'PY'
import math, struct, sys, wave
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * i / 16000))) for i in range(16000)))
PY
fi

infer() { # infer NAME PAYLOAD [AUDIO]
	local args=(-sS -o "$tmp/$1.out" -w '%{http_code}' -H "X-API-KEY: $key" -F "payload=<$2;type=application/json")
	[ $# -ge 3 ] && args+=(-F "audio=@$3;type=audio/wav")
	local code
	code="$(curl "${args[@]}" "$url/v1/infer")"
	if [ "$code" != 200 ] || ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["response"], d' "$tmp/$1.out"; then
		echo "arm64 serve: $1 infer answered $code: $(head -c 400 "$tmp/$1.out")" >&2
		return 1
	fi
	echo "arm64 serve: $1 infer: 200, $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["response"]), "replies; transcript:", repr(d.get("transcript", "")))' "$tmp/$1.out")" >&2
}
infer text "$tmp/text.json"
infer speech "$tmp/speech.json" "$tmp/speech.wav"
