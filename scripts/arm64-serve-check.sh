#!/bin/sh
# arm64-serve-check.sh BIN: a short serve-and-infer run of an arm64 replyd,
# by busybox sh inside the emulated arm64 machine
# (scripts/arm64-guest-tests.sh): it writes the demo models, serves them
# with Silero VAD on a loopback port of the guest, creates an API key and
# asks /v1/infer once with text and once with speech (the shared data's
# jfk.wav as the partner's audio-marked turn), through busybox's nc, and
# checks that both answer replies and the speech a transcript (the demo
# Whisper's random weights decode to their cap, not to words).
# Emulated, everything is many times slower than on a real core: the
# inference deadline is 10 minutes and the admission's wait estimate is off.
# The start-up log's kernels line (OpenBLAS's core, ggml's CPU features) is
# printed.
set -eu
bin="$1"
tmp="$(mktemp -d)"
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

"$bin" models demo --dir "$tmp/models" >/dev/null
port=18080
admin="arm64-check-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
REPLYD_DATA_DIR="$tmp/data" REPLYD_ADMIN_KEY="$admin" REPLYD_TLS=off REPLYD_OTP_CHANNEL=console \
	REPLYD_ADDR="127.0.0.1:$port" REPLYD_LLM_MODEL="$tmp/models/llm-demo.gguf" \
	REPLYD_WHISPER_MODEL="$tmp/models/whisper-demo.bin" REPLYD_VAD_MODEL=/mnt/repo/models/silero_vad_v5.onnx \
	REPLYD_INFER_TIMEOUT=10m REPLYD_MAX_WAIT_RATIO=0 \
	"$bin" serve >"$tmp/serve.log" 2>&1 &
pid=$!
url="http://127.0.0.1:$port"
ready=0
i=0
while [ "$i" -lt 600 ]; do
	if wget -q -O /dev/null "$url/healthz" 2>/dev/null; then ready=1; break; fi
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; echo "arm64 serve: replyd exited" >&2; exit 1; }
	sleep 1
	i=$((i + 1))
done
[ "$ready" = 1 ] || { tail -20 "$tmp/serve.log" >&2; echo "arm64 serve: not ready after 600 s" >&2; exit 1; }
echo "arm64 serve: ready after about $i s"
grep -m1 openblas_core "$tmp/serve.log" || true

wget -q -O "$tmp/key.json" --header "X-ADMIN-KEY: $admin" --header 'Content-Type: application/json' \
	--post-data '{"client_id":"arm64-check","rate_limit_per_minute":1000}' "$url/v1/admin/keys"
key="$(sed -n 's/.*"api_key":"\([^"]*\)".*/\1/p' "$tmp/key.json")"
[ -n "$key" ] || { echo "arm64 serve: no api_key in $(cat "$tmp/key.json")" >&2; exit 1; }

b="replyd-arm64-check-boundary"
form() { # form PAYLOAD [AUDIO]: a multipart/form-data body on stdout
	printf -- '--%s\r\nContent-Disposition: form-data; name="payload"\r\nContent-Type: application/json\r\n\r\n%s\r\n' "$b" "$1"
	if [ $# -ge 2 ]; then
		printf -- '--%s\r\nContent-Disposition: form-data; name="audio"; filename="speech.wav"\r\nContent-Type: audio/wav\r\n\r\n' "$b"
		cat "$2"
		printf '\r\n'
	fi
	printf -- '--%s--\r\n' "$b"
}
# busybox's wget sends a --post-file as a C string, up to its first NUL
# byte, so a WAV part would be cut short: the form goes through nc instead,
# as a raw HTTP/1.1 request that the server answers and closes.
infer() { # infer NAME PAYLOAD [AUDIO]
	name="$1"
	shift
	form "$@" >"$tmp/$name.body"
	{
		printf 'POST /v1/infer HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nX-API-KEY: %s\r\nConnection: close\r\n' "$port" "$key"
		printf 'Content-Type: multipart/form-data; boundary=%s\r\nContent-Length: %s\r\n\r\n' "$b" "$(wc -c <"$tmp/$name.body" | tr -d ' ')"
		cat "$tmp/$name.body"
	} >"$tmp/$name.req"
	# busybox's nc closes the connection when its input ends (the server
	# logs 499, client gone): its input is a FIFO kept open until the
	# server has answered and closed.
	rm -f "$tmp/fifo"
	mkfifo "$tmp/fifo"
	nc 127.0.0.1 "$port" <"$tmp/fifo" >"$tmp/$name.resp" &
	ncpid=$!
	exec 3>"$tmp/fifo"
	cat "$tmp/$name.req" >&3
	n=0
	while kill -0 "$ncpid" 2>/dev/null && [ "$n" -lt 600 ]; do sleep 1; n=$((n + 1)); done
	exec 3>&-
	kill "$ncpid" 2>/dev/null || true
	wait "$ncpid" 2>/dev/null || true
	status="$(head -1 "$tmp/$name.resp" | tr -d '\r')"
	sed '1,/^\r*$/d' "$tmp/$name.resp" >"$tmp/$name.out"
	case "$status" in
	"HTTP/1.1 200"*) ;;
	*)
		echo "arm64 serve: $name infer answered ${status:-nothing}: $(head -c 400 "$tmp/$name.out")" >&2
		return 1
		;;
	esac
	# At least one reply: "response":[ followed by something other than ].
	if ! grep -q '"response":\[[^]]' "$tmp/$name.out"; then
		echo "arm64 serve: $name infer answered no replies: $(head -c 400 "$tmp/$name.out")" >&2
		return 1
	fi
	echo "arm64 serve: $name infer: 200, $(head -c 300 "$tmp/$name.out")"
}
infer text '{"messages":[{"role":"speaker","content":"Would you like some tea?"}],"options":{"max_candidates":2}}'
infer speech '{"messages":[{"role":"speaker","content":"","audio":true}],"options":{"max_candidates":2}}' \
	/mnt/shared/whisper/audio/jfk.wav
grep -q '"transcript":"[^"]' "$tmp/speech.out" || { echo "arm64 serve: the speech infer has no transcript" >&2; exit 1; }
