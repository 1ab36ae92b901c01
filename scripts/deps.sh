#!/usr/bin/env bash
# deps.sh [run|test|arm64] [--list]: installs what replyd needs on Debian, through
# apt-get (with sudo when not root), only the packages that are missing, so a
# second run is quick.
#
#   run   what building and running need (`make run`): a C toolchain for cgo
#         (llama.cpp, OpenBLAS), llama.cpp's header-only dependencies that the
#         Go module zip leaves out, ffmpeg for M4A/AAC uploads, and Silero
#         VAD's weights (scripts/vad-model.sh).
#   arm64 run's packages plus what cross-building and testing for linux/arm64
#         need (`make build-arm64`, `make test-arm64`): Debian's cross
#         compilers, the arm64 OpenBLAS through multiarch (this adds the arm64
#         architecture to dpkg, which also lets scripts/arm64-vm.sh fetch
#         Debian's arm64 kernel and busybox-static with apt-get download,
#         unpacked into its cache, never installed), qemu-system-arm and cpio
#         for the emulated machine the tests run in, and what the host runs
#         for the VAD tests' speech and reference first (espeak-ng, sox,
#         Node.js with ONNX Runtime), and Qwen's tokenizer.json.
#   test  run's packages plus what the tests need (`make test`, the default):
#         espeak-ng and sox to make test speech, shellcheck for the scripts,
#         PostgreSQL (the store's contract suite and the two-box tests start
#         their own server in a temporary folder), HAProxy (the routing test),
#         zbar-tools (reading back the pairing QR codes), Chromium and Node.js
#         for the browser tests of the admin and conversation pages and the
#         OpenAPI lint (their npm packages too), Qwen's tokenizer.json
#         (scripts/qwen-tokenizer.sh: the synthesised Qwen2.5 shapes of the
#         tests and benchmarks), systemd-analyze (systemd) to
#         rate the unit file, and promtool to lint /metrics: taken out of
#         Debian's prometheus package into tests/.tools (installing the
#         package would also start a Prometheus server); ONNX Runtime (npm,
#         tests/vadref) for the VAD reference tests.
#
# --list prints the Debian packages of the mode and installs nothing.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mode="test"
list=0
for a in "$@"; do
	case "$a" in
	run | --run) mode="run" ;;
	test | arm64) mode="$a" ;;
	--list) list=1 ;;
	*)
		echo "usage: $0 [run|test|arm64] [--list]" >&2
		exit 2
		;;
	esac
done

run_pkgs=(build-essential pkg-config libopenblas-dev nlohmann-json3-dev libstb-dev ffmpeg)
test_pkgs=(espeak-ng sox chromium shellcheck postgresql haproxy zbar-tools systemd nodejs npm)
pkgs=("${run_pkgs[@]}")
arm64_pkgs=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev:arm64 libopenblas-dev:arm64 qemu-system-arm cpio
	espeak-ng sox nodejs npm)
if [ "$mode" = test ]; then pkgs+=("${test_pkgs[@]}"); fi
if [ "$mode" = arm64 ]; then pkgs+=("${arm64_pkgs[@]}"); fi

if [ "$list" -eq 1 ]; then
	printf '%s\n' "${pkgs[@]}"
	exit 0
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come from a non-Debian Node.js install: accept any working npm.
if command -v npm >/dev/null 2>&1; then
	tmp=()
	for p in "${missing[@]+"${missing[@]}"}"; do [[ "$p" == npm || "$p" == nodejs ]] || tmp+=("$p"); done
	missing=("${tmp[@]+"${tmp[@]}"}")
fi

if [ "${#missing[@]}" -gt 0 ]; then
	echo "deps ($mode): installing ${missing[*]}" >&2
	SUDO=""
	if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
	if [ "$mode" = arm64 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
		$SUDO dpkg --add-architecture arm64
	fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$mode" = test ]; then
	tools="$root/tests/.tools"
	if ! command -v promtool >/dev/null 2>&1 && [ ! -x "$tools/promtool" ]; then
		echo "deps: extracting promtool from Debian's prometheus package into $tools" >&2
		dl="$(mktemp -d)"
		(cd "$dl" && apt-get download prometheus >/dev/null 2>&1) ||
			{ SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo; $SUDO apt-get update -qq && (cd "$dl" && apt-get download prometheus >/dev/null); }
		dpkg-deb -x "$dl"/prometheus_*.deb "$dl/x"
		install -D -m 0755 "$dl/x/usr/bin/promtool" "$tools/promtool"
		rm -rf "$dl"
	fi
	# The browser tests (playwright-core drives Debian's chromium and
	# downloads no browser), axe-core for their accessibility check, and
	# @redocly/cli for the OpenAPI lint, pinned in tests/browser's lock file.
	# Needs Node.js 20.19 or newer.
	nm="$root/tests/browser/node_modules"
	if [ -f "$root/tests/browser/package-lock.json" ] &&
		{ [ ! -d "$nm/playwright-core" ] || [ ! -d "$nm/axe-core" ] || [ ! -d "$nm/@redocly/cli" ]; }; then
		echo "deps: installing the browser tests' npm packages" >&2
		(cd "$root/tests/browser" && npm ci --no-audit --no-fund --silent)
	fi
fi

# Silero VAD's weights (a running dependency too: `make run` fetches them
# through `make vad-model`), and ONNX Runtime for engine/vad's tests only:
# onnxruntime-node ships libonnxruntime for linux x64 inside its package; its
# install script (skipped) would only fetch optional GPU providers from a host
# outside the npm registry.
"$root/scripts/vad-model.sh"
if [ "$mode" != run ]; then "$root/scripts/qwen-tokenizer.sh"; fi
if [ "$mode" != run ] && [ ! -d "$root/tests/vadref/node_modules/onnxruntime-node" ]; then
	echo "deps: installing ONNX Runtime for the VAD reference tests" >&2
	(cd "$root/tests/vadref" && npm ci --ignore-scripts --no-audit --no-fund --silent)
fi

if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go is not installed; install Go 1.26 or newer from your distribution or go.dev" >&2
	exit 1
fi
