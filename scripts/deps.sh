#!/usr/bin/env bash
# Installs what replyd needs to build and test on Debian: a C toolchain for
# cgo (llama.cpp, OpenBLAS), llama.cpp's header-only dependencies that the Go
# module zip leaves out, ffmpeg for M4A/AAC uploads, espeak-ng and sox to make
# test speech, ShellCheck for the scripts, Chromium for the browser tests of
# the admin and conversation pages, and the npm packages of those tests
# (playwright-core, axe-core); for the tests only
# (not with --run, which `make run` passes), PostgreSQL (the store's contract
# suite and the two-box tests start their own server in a temp dir), HAProxy
# (the routing test) and zbar-tools (reading back the pairing QR codes). Runs
# apt-get (through sudo when not root) only for packages that are missing, so
# a second run is quick.
set -euo pipefail

pkgs=(build-essential pkg-config libopenblas-dev nlohmann-json3-dev libstb-dev ffmpeg espeak-ng sox chromium shellcheck nodejs npm)
# Needed by the tests only: `scripts/deps.sh --run` leaves them out.
test_pkgs=(postgresql haproxy zbar-tools)
if [ "${1:-}" != "--run" ]; then pkgs+=("${test_pkgs[@]}"); fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come from a non-Debian Node.js install: accept any working npm.
if command -v npm >/dev/null 2>&1; then
	tmp=(); for p in "${missing[@]}"; do [[ "$p" == npm || "$p" == nodejs ]] || tmp+=("$p"); done; missing=("${tmp[@]+"${tmp[@]}"}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
	echo "deps: installing ${missing[*]}" >&2
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The pages' browser tests (playwright-core drives Debian's chromium and
# downloads no browser of its own; axe-core checks accessibility). Needs
# Node.js 18.19 or newer.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" != "--run" ] && [ -f "$root/tests/browser/package-lock.json" ] && { [ ! -d "$root/tests/browser/node_modules/playwright-core" ] || [ ! -d "$root/tests/browser/node_modules/axe-core" ]; }; then
	echo "deps: installing the browser tests' npm packages" >&2
	(cd "$root/tests/browser" && npm ci --no-audit --no-fund --silent)
fi

# Silero VAD's weights (a running dependency too: `make run` fetches them
# through `make vad-model`), and ONNX Runtime for engine/vad's tests only:
# onnxruntime-node ships libonnxruntime for linux x64 inside its package; its
# install script (skipped) would only fetch optional GPU providers from a host
# outside the npm registry.
"$root/scripts/vad-model.sh"
if [ "${1:-}" != "--run" ] && [ ! -d "$root/tests/vadref/node_modules/onnxruntime-node" ]; then
	echo "deps: installing ONNX Runtime for the VAD reference tests" >&2
	(cd "$root/tests/vadref" && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi

if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go is not installed; install Go 1.26 or newer from your distribution or go.dev" >&2
	exit 1
fi
