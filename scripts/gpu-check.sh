#!/usr/bin/env bash
# gpu-check.sh: builds ggml's CUDA backend from the ollama module's own
# sources and checks and measures replyd on it, on a machine with an NVIDIA
# GPU, CUDA's compiler, CMake and ninja (no Go: everything Go is built
# beforehand by scripts/gpu-stage.sh, which fills the folder this script is
# run from). docs/gpu.md gives what it measured and how to read it.
#
#   scripts/gpu-stage.sh .gpu          # on the build machine
#   OUT=/tmp/out .gpu/gpu-check.sh     # on the GPU machine (all steps)
#   .gpu/gpu-check.sh build            # only the CUDA backend
#   .gpu/gpu-check.sh checks           # offload, answers, agreement, tok/s, short memory
#   .gpu/gpu-check.sh clinic           # the clinic turn, GPU against CPU
#   .gpu/gpu-check.sh speech           # Whisper on the GPU: tokens against the CPU, times
#   .gpu/gpu-check.sh steps            # only the tokens/s and the greedy tokens
#   .gpu/gpu-check.sh cpu              # rehearsal without a GPU: the CPU parts only
#
# Steps (each appends to $OUT/results.txt; everything goes to $OUT/log):
#  build   cmake with ollama's "CUDA 13" preset for sm_90 only (CUDA_ARCH), Ninja,
#          the ggml-cuda target alone, installed as ollama's preset installs it
#          (lib/ollama/cuda_v13 + libggml-base beside), timed. Skipped when a
#          previous run on the same machine left the library in $WORK.
#  checks  replyd serve with REPLYD_GPU_LAYERS=-1 and the backend found through
#          OLLAMA_LIBRARY_PATH as Dockerfile.cuda sets it: the offload lines,
#          /healthz, /v1/infer at temperature 0 with one seed, against the same
#          request on the CPU (REPLYD_GPU_LAYERS=0, with and without the CUDA
#          backend loaded); generation tokens/s at 1 to 4 sequences and 16
#          greedy tokens with their leads (replyd models steps --greedy; the
#          prompt's tokens/s are the servers' "history budget set" lines);
#          replyd with too little GPU memory left (a PyTorch process holds
#          the rest).
#  clinic  cmd/benchlatency's clinic turn (5 s utterance, 3 candidates, going
#          on) on the GPU (speech too: REPLYD_WHISPER_BACKEND=gpu) and on this
#          machine's CPU cores, one after the other. Targets: turn <= 400 ms,
#          speech <= 100 ms on an H100/H200.
#  speech  `replyd transcribe --compute gpu` against `--compute blas` on the
#          conformance models and clips the stage carries (token ids equal?)
#          and on the clinic's Whisper model with jfk.wav (stage times, and
#          the "whisper graph placed" line: device, weights and caches,
#          compute buffers, free memory). SPEECH_MODE=ggml-cpu runs the same
#          on ggml's CPU backend (the `cpu` rehearsal does).
#          Under short memory (checks): `--compute gpu` must fail with the
#          placement error, and serve's auto must fall back to the CPU.
set -uo pipefail

STAGE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-/tmp/gpu-check-out}"
WORK="${GPU_WORK:-/tmp/gpu-check}"
CUDA_ARCH="${CUDA_ARCH:-90}"
JOBS="${JOBS:-$(nproc)}"
TURNS="${TURNS:-3}"
SHAPE="${SHAPE:-qwen2.5-1.5b}"
mkdir -p "$OUT" "$WORK"
LOG="$OUT/log"
RES="$OUT/results.txt"
exec > >(tee -a "$LOG") 2>&1

say() { echo "== $(date -u +%T) $*"; }
result() { echo "$*" | tee -a "$RES"; }

# --- unpacking what scripts/gpu-stage.sh packed --------------------------------
unxz_to() { # FILE.xz DEST
	if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else
		python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; fi
}
untar_xz() { # FILE.tar.xz DIR
	mkdir -p "$2"
	if command -v xz >/dev/null; then xz -dc "$1" | tar -x -C "$2"; else
		python3 -c 'import sys,tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"; fi
}
unpack() {
	[ -x "$WORK/bin/replyd" ] && return 0
	say "unpacking the staged binaries and libraries into $WORK"
	mkdir -p "$WORK/bin" "$WORK/syslib" "$WORK/models"
	for f in "$STAGE"/bin/*.xz; do unxz_to "$f" "$WORK/bin/$(basename "$f" .xz)"; done
	chmod +x "$WORK"/bin/*
	for f in "$STAGE"/syslib/*.xz; do [ -e "$f" ] && unxz_to "$f" "$WORK/syslib/$(basename "$f" .xz)"; done
	unxz_to "$STAGE/qwen-tokenizer.json.xz" "$WORK/qwen-tokenizer.json"
	cp "$STAGE"/jfk.wav "$STAGE"/silero_vad_v5.onnx "$WORK/"
}

# The libraries replyd needs that the machine may lack (OpenBLAS and its
# Fortran runtime), from the build machine: found after the system's own
# only when the system has none.
syslib_path() {
	if ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0 '; then echo ""; else echo "$WORK/syslib"; fi
}

DIST="$WORK/ollama/dist/lib/ollama"
CUDALIB="$DIST/cuda_v13"

# --- build -----------------------------------------------------------------------
build() {
	if [ -f "$CUDALIB/libggml-cuda.so" ]; then
		say "build: $CUDALIB/libggml-cuda.so is there from an earlier run; not rebuilt"
		return 0
	fi
	if ! command -v nvcc >/dev/null; then
		for d in /usr/local/cuda/bin /usr/local/cuda-13/bin /usr/local/cuda-13.0/bin; do [ -x "$d/nvcc" ] && export PATH="$PATH:$d" && break; done
	fi
	say "build: $(nvcc --version | tail -2 | head -1); $(cmake --version | head -1); ninja $(ninja --version); $JOBS jobs"
	src="$WORK/ollama"
	rm -rf "$src" && untar_xz "$STAGE/ollama-ggml.tar.xz" "$src"
	cd "$src" || return 1
	# ollama's "CUDA 13" preset (cuda_v13 runner folder, its CUDA flags) for
	# one architecture; Vulkan is left out even where its SDK is installed.
	# GGML_CUDA_FA_ALL_QUANTS stays off (ollama's default): the vector
	# flash-attention kernels are built for f16, q4_0 and q8_0 caches only.
	local t0=$SECONDS
	cmake --preset 'CUDA 13' -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" \
		-DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON -DGGML_CCACHE=OFF >"$WORK/cmake-configure.log" 2>&1 ||
		{ tail -40 "$WORK/cmake-configure.log"; result "build: cmake configure FAILED"; return 1; }
	grep -E 'CUDA Toolkit found|Using CUDA architectures|CUDA compiler|ccache' "$WORK/cmake-configure.log"
	local t1=$SECONDS
	cmake --build build --target ggml-cuda -j "$JOBS" 2>&1 | awk 'NR%40==1 || /error|FAILED|warning: /' ||
		true
	if [ ! -f build/lib/ollama/libggml-cuda.so ]; then
		result "build: ggml-cuda FAILED after $((SECONDS - t1)) s"
		return 1
	fi
	local t2=$SECONDS
	result "build: configure $((t1 - t0)) s, ggml-cuda (sm_$CUDA_ARCH, $JOBS jobs) $((t2 - t1)) s"
	if ! cmake --install build --component CUDA --strip >"$WORK/cmake-install.log" 2>&1; then
		# The install copies libcudart/libcublas/libcublasLt beside the
		# backend; where it cannot resolve them the toolkit's own are used.
		tail -5 "$WORK/cmake-install.log"
		result "build: cmake --install --component CUDA failed; copying libggml-cuda.so alone"
		mkdir -p "$CUDALIB" && cp -a build/lib/ollama/libggml-cuda.so "$CUDALIB/"
	fi
	cp -a build/lib/ollama/libggml-base.so* "$DIST/"
	result "build: installed $(cd "$DIST" && find . -name '*.so*' -printf '%p %s\n' | sort | awk '{printf "%s(%d MiB) ", $1, $2/1048576}')"
	cd - >/dev/null || true
}

# --- replyd servers --------------------------------------------------------------
ADMIN="gpucheck-admin-key-$$-$RANDOM$RANDOM"
# env_gpu/env_cpu: how replyd is started; CPU without the CUDA backend is
# what a box without a GPU runs (nothing found in OLLAMA_LIBRARY_PATH).
# runenv MODE sets RUNENV, the environment replyd runs with in that mode:
# gpu (every layer on the GPU), ngl0 (the CUDA backend loaded, no layer on
# it) or cpu (no CUDA backend found in OLLAMA_LIBRARY_PATH: what a box
# without a GPU runs).
RUNENV=()
runenv() {
	local mode=$1 ld lib sl ngl=0
	sl=$(syslib_path)
	case $mode in
	gpu | ngl0)
		lib="$CUDALIB"
		# As Dockerfile.cuda: the backend's folder, libggml-base's, and
		# where NVIDIA's container runtimes put the driver's libraries.
		ld="$CUDALIB:$DIST:/usr/local/nvidia/lib:/usr/local/nvidia/lib64${sl:+:$sl}"
		;;
	cpu)
		lib="$WORK/nocuda"
		mkdir -p "$lib"
		ld="$sl"
		;;
	esac
	[ "$mode" = gpu ] && ngl=-1
	RUNENV=(OLLAMA_LIBRARY_PATH="$lib" LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" REPLYD_GPU_LAYERS="$ngl")
}

PORT=18470
SERVER_PID=""
start_server() { # MODE NAME [ENV=VAL...]
	local mode=$1 name=$2
	shift 2
	PORT=$((PORT + 1))
	rm -rf "$WORK/data-$name"
	runenv "$mode"
	# env execs replyd: $! is replyd's own process.
	env "${RUNENV[@]}" REPLYD_ADDR="127.0.0.1:$PORT" REPLYD_TLS=off REPLYD_ADMIN_KEY="$ADMIN" REPLYD_OTP_CHANNEL=console \
		REPLYD_DATA_DIR="$WORK/data-$name" REPLYD_LLM_MODEL="$LLM" REPLYD_WHISPER_MODEL="$WHISPER" \
		REPLYD_VAD_MODEL="$WORK/silero_vad_v5.onnx" REPLYD_SEED=42 REPLYD_LOG_LEVEL=debug REPLYD_LOG_FORMAT=text "$@" \
		"$WORK/bin/replyd" serve >"$WORK/serve-$name.log" 2>&1 &
	SERVER_PID=$!
	for _ in $(seq 1 300); do
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			wait "$SERVER_PID"
			echo "replyd ($name) exited with $? before answering"
			SERVER_PID=""
			return 1
		fi
		[ "$(http GET /healthz)" = 200 ] && return 0
		sleep 0.5
	done
	echo "replyd ($name) not ready after 150 s"
	return 1
}
stop_server() {
	[ -n "$SERVER_PID" ] || return 0
	kill -TERM "$SERVER_PID" 2>/dev/null
	wait "$SERVER_PID" 2>/dev/null
	SERVER_PID=""
}
# http METHOD PATH [HEADER-NAME HEADER-VALUE] [JSON-BODY]: prints the status,
# the body into $WORK/body.
http() {
	python3 - "$PORT" "$@" <<'EOF'
import sys, urllib.request, urllib.error
port, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
rest = sys.argv[4:]
headers, body = {}, None
if len(rest) >= 2:
    headers[rest[0]] = rest[1]
if len(rest) == 3 and path == "/v1/infer":
    # /v1/infer takes multipart/form-data with a "payload" part.
    b = "gpucheckboundary7d1"
    body = (f'--{b}\r\nContent-Disposition: form-data; name="payload"\r\nContent-Type: application/json\r\n\r\n'
            + rest[2] + f"\r\n--{b}--\r\n").encode()
    headers["Content-Type"] = f"multipart/form-data; boundary={b}"
elif len(rest) == 3:
    body = rest[2].encode(); headers["Content-Type"] = "application/json"
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method=method)
try:
    r = urllib.request.urlopen(req, timeout=300); status, data = r.status, r.read()
except urllib.error.HTTPError as e:
    status, data = e.code, e.read()
except Exception as e:
    status, data = 0, str(e).encode()
import os
open(os.environ.get("WORK", "/tmp") + "/body", "wb").write(data)
print(status)
EOF
}
export WORK

INFER='{"messages":[{"role":"speaker","content":"Good morning! Did you sleep well, and would you like tea or coffee before the physio comes at ten?"}],"options":{"max_candidates":3,"temperature":0}}'

# infer_once NAME: an API key, /healthz (with and without the admin key), one
# /v1/infer; its answer into $WORK/infer-NAME.json.
infer_once() {
	local name=$1 st key
	st=$(http GET /healthz)
	result "$name: GET /healthz -> $st $(cat "$WORK/body")"
	st=$(http GET /healthz X-ADMIN-KEY "$ADMIN")
	result "$name: GET /healthz (admin) -> $st $(head -c 600 "$WORK/body")"
	st=$(http POST /v1/admin/keys X-ADMIN-KEY "$ADMIN" '{"client_id":"gpucheck","rate_limit_per_minute":1000}')
	key=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_key"])' "$WORK/body" 2>/dev/null)
	[ -n "$key" ] || { result "$name: creating an API key -> $st $(cat "$WORK/body")"; return 1; }
	local t0
	t0=$(date +%s.%N)
	st=$(http POST /v1/infer X-API-KEY "$key" "$INFER")
	cp "$WORK/body" "$WORK/infer-$name.json"
	command -v nvidia-smi >/dev/null && result "$name: GPU memory used while serving: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
	result "$name: POST /v1/infer -> $st in $(python3 -c "import sys; print(round(float(sys.argv[2])-float(sys.argv[1]),3))" "$t0" "$(date +%s.%N)") s: $(head -c 900 "$WORK/body")"
	[ "$st" = 200 ]
}

# first_tokens A B: how many leading tokens (llama.cpp's, through replyd's
# vocabulary: whitespace-split words stand in here) of the first candidates agree.
agree() { # NAME-A NAME-B
	python3 - "$WORK/infer-$1.json" "$WORK/infer-$2.json" "$1" "$2" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["response"][0]
b = json.load(open(sys.argv[2]))["response"][0]
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]:
    n += 1
wa, wb = a.split(" "), b.split(" ")
w = 0
while w < min(len(wa), len(wb)) and wa[w] == wb[w]:
    w += 1
print(f"greedy candidate {sys.argv[3]} vs {sys.argv[4]}: {'IDENTICAL' if a == b else 'differ'}; "
      f"first {n} of {len(a)}/{len(b)} characters and {w} of {len(wa)}/{len(wb)} words agree; "
      f"{sys.argv[3]}={a[:120]!r} {sys.argv[4]}={b[:120]!r}")
EOF
}

models() {
	LLM="$WORK/models/synth-$SHAPE-q8_0.gguf"
	WHISPER="$WORK/models/synth-base.en-q8_0.bin"
	[ -f "$LLM" ] && [ -f "$WHISPER" ] && return 0
	say "synthesising $SHAPE and base.en (random weights, real shapes)"
	REPLYD_QWEN_TOKENIZER="$WORK/qwen-tokenizer.json" "$WORK/bin/replyd" models synth --shape "$SHAPE" --dir "$WORK/models" &&
		"$WORK/bin/replyd" models synth --shape base.en --dir "$WORK/models"
}

checks() {
	local modes=("$@")
	models || { result "checks: models synth FAILED"; return 1; }
	for m in "${modes[@]}"; do
		say "checks: replyd serve ($m)"
		if start_server "$m" "$m"; then
			infer_once "$m"
		else
			result "$m: replyd serve did not start: $(tail -5 "$WORK/serve-$m.log")"
		fi
		stop_server
		result "$m: $(grep -m1 -o 'offloaded [0-9]*/[0-9]* layers to GPU' "$WORK/serve-$m.log" || echo 'no offload line')"
		grep -E 'ggml_cuda_init|Device 0:|load_backend|using device|CUDA0 model buffer|CPU_Mapped model buffer|language model loaded|history budget set|whisper.*loaded|level=(WARN|ERROR)' "$WORK/serve-$m.log" | grep -v 'msg=generated' | head -20 | sed "s/^/$m log: /" | tee -a "$RES"
	done
	[ -f "$WORK/infer-gpu.json" ] && [ -f "$WORK/infer-ngl0.json" ] && result "$(agree gpu ngl0)"
	[ -f "$WORK/infer-gpu.json" ] && [ -f "$WORK/infer-cpu.json" ] && result "$(agree gpu cpu)"
	[ -f "$WORK/infer-ngl0.json" ] && [ -f "$WORK/infer-cpu.json" ] && result "$(agree ngl0 cpu)"
	stepcheck "${modes[@]}"
}

# stepcheck MODES...: generation tokens/s at 1 to 4 sequences (replyd models
# steps), and 16 tokens of the filler prompt's greedy continuation (the raw
# argmax of the logits, no sampler) compared across the modes, with each
# token's lead over the runner-up.
stepcheck() {
	local m
	models || return 1
	for m in "$@"; do
		say "steps: $m, 1 to 4 sequences after 500 and 2000 prompt tokens, greedy 16"
		local args=(--seqs 4 --contexts "500,2000" --rounds 9)
		# ngl0 only for the greedy tokens: its steps are the CPU's.
		[ "$m" = ngl0 ] && args=(--seqs 1 --contexts 500 --rounds 1)
		runenv "$m"
		if env "${RUNENV[@]}" "$WORK/bin/replyd" models steps --model "$LLM" "${args[@]}" --greedy 16 >"$WORK/steps-$m.json" 2>"$WORK/steps-$m.err"; then
			[ "$m" = ngl0 ] && continue
			python3 - "$WORK/steps-$m.json" "$m" <<'EOF2' | tee -a "$RES"
import json, sys
t = json.load(open(sys.argv[1]))
for c, row in zip(t["context"], t["step_us"]):
    print(f"{sys.argv[2]}: generation after {c} prompt tokens: " + ", ".join(
        f"N={k}: step {row[k]/1000:.2f} ms = {k*1e6/row[k]:.0f} tok/s" for k in (1, 2, 3, 4) if k < len(row)))
EOF2
		else
			result "$m: models steps FAILED: $(tail -3 "$WORK/steps-$m.err")"
		fi
	done
	python3 - "$WORK" "$@" <<'EOF2' | tee -a "$RES"
import json, sys, os
work, modes = sys.argv[1], sys.argv[2:]
g = {}
for m in modes:
    p = os.path.join(work, f"steps-{m}.json")
    if os.path.exists(p) and os.path.getsize(p):
        g[m] = json.load(open(p)).get("greedy") or []
names = list(g)
for i in range(len(names)):
    for j in range(i + 1, len(names)):
        a, b = g[names[i]], g[names[j]]
        n = 0
        while n < min(len(a), len(b)) and a[n]["token"] == b[n]["token"]:
            n += 1
        line = f"greedy tokens {names[i]} vs {names[j]}: first {n} of {min(len(a), len(b))} agree"
        if n:
            line += f"; smallest lead over the runner-up on the agreeing ones {min(x['margin'] for x in a[:n]):.3f} ({names[i]})"
            d = max(abs(x["logit"] - y["logit"]) for x, y in zip(a[:n], b[:n]))
            line += f"; largest difference of the chosen logit {d:.4f}"
        if n < min(len(a), len(b)):
            line += f"; at token {n}: {names[i]} {a[n]['token']} (lead {a[n]['margin']:.3f}), {names[j]} {b[n]['token']} (lead {b[n]['margin']:.3f})"
        print(line)
for m in names:
    print(f"greedy {m}: " + " ".join(f"{x['token']}({x['margin']:.2f})" for x in g[m]))
EOF2
}

# short_memory: leave LEFT_MIB of the GPU's memory free (PyTorch holds the
# rest with one plain allocation) and start replyd with every layer on the GPU.
short_memory() {
	local left=${LEFT_MIB:-1024}
	say "short memory: a PyTorch process holds all but $left MiB of the GPU"
	python3 - "$left" >"$WORK/hog.log" 2>&1 <<'EOF' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
n = free - int(sys.argv[1]) * 2**20
x = torch.empty(n, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(f"holding {n >> 20} MiB of {total >> 20}; free now {torch.cuda.mem_get_info()[0] >> 20} MiB", flush=True)
time.sleep(600)
EOF
	local hog=$!
	for _ in $(seq 1 60); do grep -q holding "$WORK/hog.log" && break; kill -0 $hog 2>/dev/null || break; sleep 0.5; done
	result "short memory: $(tail -2 "$WORK/hog.log")"
	speech_short
	if start_server gpu short; then
		infer_once short
		stop_server
		result "short memory: replyd STARTED; $(grep -m1 -o 'offloaded [0-9]*/[0-9]* layers to GPU' "$WORK/serve-short.log")"
	else
		result "short memory: replyd did not start"
	fi
	grep -E 'offloaded|level=(WARN|ERROR)|out of memory|alloc|cannot load|fallback|falls back|whisper graph placed|language model loaded' "$WORK/serve-short.log" | head -14 | sed 's/^/short log: /' | tee -a "$RES"
	kill $hog 2>/dev/null
	wait $hog 2>/dev/null
}

clinic() {
	local modes=("$@") m
	models || return 1
	for m in "${modes[@]}"; do
		[ "$m" = ngl0 ] && continue
		say "clinic turn: $m, $TURNS going-on turns"
		mkdir -p "$WORK/clinic-$m"
		runenv "$m"
		env "${RUNENV[@]}" REPLYD_QWEN_TOKENIZER="$WORK/qwen-tokenizer.json" "$WORK/bin/benchlatency" -bin "$WORK/bin/replyd" \
			-models "$WORK/models" -llm "$SHAPE" -turns "$TURNS" -audio "$WORK/jfk.wav" -logs "$WORK/clinic-$m" \
			-env "REPLYD_GPU_LAYERS=$([ "$m" = gpu ] && echo -1 || echo 0),REPLYD_WHISPER_BACKEND=$([ "$m" = gpu ] && echo gpu || echo cpu),REPLYD_VAD_MODEL=$WORK/silero_vad_v5.onnx" \
			>"$WORK/clinic-$m.txt" 2>"$WORK/clinic-$m.err"
		result "clinic $m (rc $?):"
		sed "s/^/  /" "$WORK/clinic-$m.txt" | tee -a "$RES"
		tail -3 "$WORK/clinic-$m.err" | sed "s/^/  stderr: /"
		# Where a turn's time goes: the server's per-request lines.
		grep -h -E 'msg=generated|"msg":"generated"|whisper|transcrib' "$WORK"/clinic-"$m"/*overlap.log 2>/dev/null | grep -v '^$' | tail -2 | cut -c1-700 | sed "s/^/  log: /" | tee -a "$RES"
	done
}

# jfield NAME FILE: the value of NAME (an array or an object) in replyd
# transcribe's indented JSON, on one line without spaces (the log lines
# before the JSON are skipped).
jfield() {
	sed -n '/^{/,$p' "$2" | tr -d ' \n' | grep -o "\"$1\":[[{][^]}]*[]}]"
}

# agree_tokens A B: "k/n same" for the transcript token ids of two runs
# (position by position; n is the longer list), or "FAILED" when one has
# none. (Named apart from agree above, which it would replace: the clinic
# check's candidate agreement would then read transcript tokens.)
agree_tokens() {
	local a b
	a="$(jfield tokens "$1")" b="$(jfield tokens "$2")"
	if [ -z "$a" ] || [ -z "$b" ]; then
		echo FAILED
		return
	fi
	awk -v a="${a#*[}" -v b="${b#*[}" 'BEGIN { gsub(/]/, "", a); gsub(/]/, "", b)
		n = split(a, x, ","); m = split(b, y, ","); k = 0
		for (i = 1; i <= (n < m ? n : m); i++) if (x[i] == y[i]) k++
		printf "%d/%d same", k, (n > m ? n : m) }'
}

speech() {
	local model clip mode out f base sm="${SPEECH_MODE:-gpu}"
	models || return 1
	runenv "$([ "$sm" = gpu ] && echo gpu || echo cpu)"
	say "speech: Whisper on $sm against the CPU"
	# Each clip on the CPU path (blas), on the graphs on the CPU (ggml-cpu) and
	# on $sm: the graphs quantise activations to q8_0 before quantised
	# products (as whisper.cpp), blas does not, so on these random-weight
	# quantised models blas and the graphs part at a few near ties
	# (TestGraphMatchesBLAS allows 10%); the GPU should match ggml-cpu's.
	local modes=(blas ggml-cpu)
	[ "$sm" = ggml-cpu ] || modes+=("$sm")
	for model in "$STAGE"/conformance/*.bin; do
		for clip in "$STAGE"/conformance/*.wav "$STAGE/jfk.wav"; do
			for mode in "${modes[@]}"; do
				out="$WORK/speech-$(basename "$model" .bin)-$(basename "$clip" .wav)-$mode.json"
				env "${RUNENV[@]}" "$WORK/bin/replyd" transcribe --json --no-vad --no-fallback --threads 1 \
					--compute "$mode" --model "$model" "$clip" >"$out" 2>"$out.err" ||
					result "speech $mode $(basename "$model") $(basename "$clip"): FAILED $(tail -1 "$out.err")"
			done
			base="${out%-"$sm".json}"
			result "speech tokens $(basename "$model") $(basename "$clip"): $sm against blas $(agree_tokens "$base-blas.json" "$out"), against ggml-cpu $(agree_tokens "$base-ggml-cpu.json" "$out")"
			if [ "$(jfield tokens "$base-ggml-cpu.json")" != "$(jfield tokens "$out")" ]; then
				for f in "$base-blas.json" "$base-ggml-cpu.json" "$out"; do echo "  $(basename "$f"): $(jfield tokens "$f" | cut -c1-400)"; done | tee -a "$RES"
			fi
		done
	done
	# The clinic's model: the first $sm run is cold (CUDA's kernels load), the
	# second is the figure to read (target: encoder + decoder <= 100 ms).
	for mode in blas "$sm" "$sm"; do
		env "${RUNENV[@]}" "$WORK/bin/replyd" transcribe --json --no-vad --threads "$(nproc)" --compute "$mode" \
			--model "$WHISPER" "$WORK/jfk.wav" >"$WORK/speech-clinic-$mode.json" 2>&1
		result "speech $mode $(basename "$WHISPER") jfk.wav: $(jfield timings_ms "$WORK/speech-clinic-$mode.json") text tokens $(jfield tokens "$WORK/speech-clinic-$mode.json" | tr -cd , | wc -c | awk '{print $1 + 1}')"
	done
	result "speech placed: $(grep -h -o 'where="[^"]*"' "$WORK/speech-clinic-$sm.json" | head -1)"
}

# speech_short: with the GPU's memory held (short_memory), speech asked for
# on the GPU fails at load with the placement error (no crash, no OOM
# mid-turn).
speech_short() {
	runenv gpu
	env "${RUNENV[@]}" "$WORK/bin/replyd" transcribe --json --no-vad --compute gpu --model "$WHISPER" "$WORK/jfk.wav" \
		>"$WORK/speech-short.json" 2>&1
	result "short memory: transcribe --compute gpu rc $?: $(grep -v '^$' "$WORK/speech-short.json" | tail -1 | cut -c1-400)"
}

env_report() {
	say "machine: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$RES"
	echo "ldd replyd:"
	LD_LIBRARY_PATH="$(syslib_path)" ldd "$WORK/bin/replyd" | sed 's/^/  /'
	result "openblas from: $(if [ -n "$(syslib_path)" ]; then echo carried; else echo system; fi)"
}

step="${1:-all}"
say "gpu-check.sh $step (stage $STAGE, work $WORK, out $OUT)"
unpack || exit 1
env_report
case $step in
build) build ;;
checks)
	checks gpu ngl0 cpu
	short_memory
	;;
clinic) clinic gpu cpu ;;
speech) speech ;;
steps) stepcheck gpu ngl0 cpu ;;
clinic-gpu) clinic gpu ;;
all)
	# The models are written while the backend compiles.
	models >"$WORK/synth.log" 2>&1 &
	synth=$!
	build
	wait $synth || { cat "$WORK/synth.log"; result "models synth FAILED"; }
	[ -f "$CUDALIB/libggml-cuda.so" ] || exit 1
	checks gpu ngl0 cpu
	short_memory
	speech
	clinic gpu cpu
	;;
cpu)
	# Rehearsal on a machine without a GPU: the CPU paths of every step.
	SHAPE="${SHAPE:-qwen2.5-0.5b}"
	checks cpu
	SPEECH_MODE=ggml-cpu speech
	[ -n "${SKIP_CLINIC:-}" ] || clinic cpu
	;;
*)
	echo "usage: gpu-check.sh [all|build|checks|clinic|speech|cpu]"
	exit 2
	;;
esac
say "done"
# The servers' logs, in one file (what comes back from the GPU machine is
# at most 8 files).
(cd "$WORK" && tar -czf "$OUT/logs.tar.gz" --ignore-failed-read serve-*.log steps-*.* speech-* clinic-* cmake-*.log synth.log hog.log infer-*.json 2>/dev/null) || true
