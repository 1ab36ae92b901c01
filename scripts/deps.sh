#!/usr/bin/env bash
# Installs what replyd needs to build and test on Debian: a C toolchain for
# cgo (llama.cpp, OpenBLAS), llama.cpp's header-only dependencies that the Go
# module zip leaves out, ffmpeg for M4A/AAC uploads, espeak-ng and sox to make
# test speech, zbar-tools to read back the pairing QR codes in tests,
# ShellCheck for the scripts, Chromium for the browser tests of the admin and
# conversation pages, and the npm packages of those tests. Runs apt-get (through sudo when not root) only for
# packages that are missing, so a second run is quick.
set -euo pipefail

pkgs=(build-essential pkg-config libopenblas-dev nlohmann-json3-dev libstb-dev ffmpeg espeak-ng sox zbar-tools chromium shellcheck nodejs npm)
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
if [ -f "$root/tests/browser/package-lock.json" ] && { [ ! -d "$root/tests/browser/node_modules/playwright-core" ] || [ ! -d "$root/tests/browser/node_modules/axe-core" ]; }; then
	echo "deps: installing the browser tests' npm packages" >&2
	(cd "$root/tests/browser" && npm ci --no-audit --no-fund --silent)
fi

if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go is not installed; install Go 1.26 or newer from your distribution or go.dev" >&2
	exit 1
fi
