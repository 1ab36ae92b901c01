#!/usr/bin/env bash
# install.sh: installs replyd on the appliance as a systemd service.
#
#   sudo scripts/install.sh [--bin bin/replyd] [--models DIR] [--addr :8080] [--no-start] [--dry-run]
#
# What it does, every step safe to repeat:
#   0. installs ffmpeg with apt-get when it is missing (replyd decodes M4A/AAC
#      recordings, what iPads send, through it); when it cannot, it says at
#      the end that M4A uploads are unavailable (415) until ffmpeg is there;
#   1. creates the system user and group `replyd` (no login, no home);
#   2. installs the binary to /usr/local/bin/replyd;
#   3. creates /var/lib/replyd (0750, replyd:replyd) for the bbolt file and
#      /var/lib/replyd/models (0750, root:replyd) for the models; with --models DIR it checks the
#      files with `replyd models verify` and copies them there;
#   4. writes /etc/replyd/replyd.env (0640, root:replyd) with every REPLYD_*
#      variable documented, only when it does not exist yet: an existing
#      configuration is never overwritten;
#   5. installs scripts/replyd.service to /etc/systemd/system/, adding a
#      drop-in with CAP_NET_BIND_SERVICE only when the port is below 1024;
#   6. systemctl enable --now replyd (restart when it was already running),
#      waits for /healthz, and prints the admin key (from the journal, where
#      replyd prints it once at first start) and the admin page's URL.
#
# --dry-run prints every step instead of doing it; it needs neither root nor
# systemd.
set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_dir="$(cd "$script_dir/.." && pwd)"

bin_src="$repo_dir/bin/replyd"
models_src=""
addr=""
start=1
dry_run=0

BIN_DST=/usr/local/bin/replyd
DATA_DIR=/var/lib/replyd
MODELS_DIR=$DATA_DIR/models
ETC_DIR=/etc/replyd
ENV_FILE=$ETC_DIR/replyd.env
UNIT_SRC="$script_dir/replyd.service"
UNIT_DST=/etc/systemd/system/replyd.service
DROPIN_DIR=/etc/systemd/system/replyd.service.d
DROPIN=$DROPIN_DIR/10-low-port.conf
HEALTH_WAIT_S=${REPLYD_INSTALL_HEALTH_WAIT_S:-120}

die() {
	echo "install: $*" >&2
	exit 1
}
say() { echo "install: $*"; }

while [ $# -gt 0 ]; do
	case "$1" in
	--bin)
		[ $# -ge 2 ] || die "--bin needs a path"
		bin_src="$2"
		shift 2
		;;
	--models)
		[ $# -ge 2 ] || die "--models needs a folder"
		models_src="$2"
		shift 2
		;;
	--addr)
		[ $# -ge 2 ] || die "--addr needs host:port"
		addr="$2"
		shift 2
		;;
	--no-start)
		start=0
		shift
		;;
	--dry-run)
		dry_run=1
		shift
		;;
	-h | --help)
		sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done

# run CMD...: runs a command, or prints it under --dry-run.
run() {
	if [ "$dry_run" -eq 1 ]; then
		printf '+'
		printf ' %q' "$@"
		printf '\n'
	else
		"$@"
	fi
}

# write_file PATH MODE OWNER:GROUP: writes stdin to PATH atomically with the
# given mode and owner, or prints it under --dry-run.
write_file() {
	local path="$1" mode="$2" owner="$3" tmp
	if [ "$dry_run" -eq 1 ]; then
		echo "+ write $path (mode $mode, owner $owner):"
		sed 's/^/|   /'
		return 0
	fi
	tmp="$(mktemp "$path.XXXXXX")"
	cat >"$tmp"
	chmod "$mode" "$tmp"
	chown "$owner" "$tmp"
	mv -f "$tmp" "$path"
}

# port_of ADDR: the port of host:port, [v6]:port or :port.
port_of() {
	local p="${1##*:}"
	case "$p" in
	'' | *[!0-9]*) die "cannot read a port in address '$1'" ;;
	esac
	echo "$p"
}

# env_value NAME: the value NAME has in the env file (empty when unset or
# commented out).
env_value() {
	[ -f "$ENV_FILE" ] || return 0
	sed -n "s/^[[:space:]]*$1=//p" "$ENV_FILE" | tail -n 1 | sed 's/^"\(.*\)"$/\1/'
}

# pick_model DIR KIND: the model file to configure from DIR: the recommended
# one when present, else the first of its kind.
pick_model() {
	local dir="$1" kind="$2" f
	if [ "$kind" = llm ]; then
		for f in qwen2.5-1.5b-instruct-q4_k_m.gguf Llama-3.2-1B-Instruct-Q4_K_M.gguf; do
			[ -f "$dir/$f" ] && { echo "$f"; return 0; }
		done
		find "$dir" -maxdepth 1 -type f -name '*.gguf' -printf '%f\n' | sort | head -n 1
	else
		for f in ggml-base.en.bin ggml-small.en-q5_1.bin ggml-small-q5_1.bin; do
			[ -f "$dir/$f" ] && { echo "$f"; return 0; }
		done
		find "$dir" -maxdepth 1 -type f -name 'ggml-*.bin' -printf '%f\n' | sort | head -n 1
	fi
}

# ---- checks -----------------------------------------------------------------
[ -f "$UNIT_SRC" ] || die "unit file $UNIT_SRC not found"
if [ "$dry_run" -eq 0 ]; then
	[ "$(id -u)" -eq 0 ] || die "run as root (sudo $0 ...), or with --dry-run to see the steps"
	[ -x "$bin_src" ] || die "binary $bin_src not found or not executable (build it: make build, or pass --bin)"
	if ! command -v systemctl >/dev/null 2>&1 || [ ! -d /run/systemd/system ]; then
		die "systemd is not running on this machine; replyd's installer needs it (use --dry-run to see the steps)"
	fi
	command -v curl >/dev/null 2>&1 || die "curl is required to wait for /healthz"
fi

existing_addr="$(env_value REPLYD_ADDR)"
addr="${addr:-${existing_addr:-:8080}}"
port="$(port_of "$addr")"

# ---- 0. ffmpeg (M4A/AAC uploads) -------------------------------------------------
m4a_note=""
if command -v ffmpeg >/dev/null 2>&1; then
	say "ffmpeg found: M4A/AAC uploads are decoded"
elif command -v apt-get >/dev/null 2>&1; then
	say "ffmpeg is missing: installing it for M4A/AAC uploads (iPads)"
	if ! run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg; then
		# Stale package lists are the usual cause; without a reachable
		# package source both fail and the install goes on without it.
		if ! { run apt-get update -qq && run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ffmpeg; }; then
			m4a_note="apt-get could not install ffmpeg (no package source reachable?)"
		fi
	fi
else
	m4a_note="ffmpeg is not installed and this system has no apt-get"
fi

# ---- 1. user ----------------------------------------------------------------
if getent passwd replyd >/dev/null 2>&1; then
	say "user replyd exists"
else
	say "creating system user replyd"
	run useradd --system --user-group --home-dir "$DATA_DIR" --no-create-home \
		--shell /usr/sbin/nologin --comment "replyd service" replyd
fi

# ---- 2. binary ----------------------------------------------------------------
say "installing $bin_src -> $BIN_DST"
run install -D -m 0755 -o root -g root "$bin_src" "$BIN_DST"

# ---- 3. data and models -----------------------------------------------------
run install -d -m 0750 -o replyd -g replyd "$DATA_DIR"
# Models belong to root: the service reads them and cannot alter them.
run install -d -m 0750 -o root -g replyd "$MODELS_DIR"
if [ -n "$models_src" ]; then
	say "verifying models in $models_src against the manifest"
	run "$BIN_DST" models verify --dir "$models_src"
	for f in "$models_src"/*.gguf "$models_src"/*.bin "$models_src"/*.onnx; do
		[ -e "$f" ] || continue
		run install -m 0640 -o root -g replyd "$f" "$MODELS_DIR/"
	done
fi

# ---- 4. configuration --------------------------------------------------------
run install -d -m 0750 -o root -g replyd "$ETC_DIR"
if [ -f "$ENV_FILE" ]; then
	say "$ENV_FILE exists: left as it is"
	if [ -n "$existing_addr" ] && [ "$existing_addr" != "$addr" ]; then
		die "--addr $addr differs from REPLYD_ADDR=$existing_addr in $ENV_FILE; edit the file instead"
	fi
else
	scan_dir="$MODELS_DIR"
	if [ "$dry_run" -eq 1 ] && [ -n "$models_src" ]; then scan_dir="$models_src"; fi
	llm="" whisper=""
	if [ -d "$scan_dir" ]; then
		llm="$(pick_model "$scan_dir" llm)"
		whisper="$(pick_model "$scan_dir" whisper)"
	fi
	if [ -z "$llm" ] || [ -z "$whisper" ]; then
		say "WARNING: no model found in $MODELS_DIR; writing DEMO models so the service starts."
		say "WARNING: demo models give meaningless replies. Fetch real ones with scripts/fetch-models.sh"
		say "WARNING: and re-run: install.sh --models DIR (then edit $ENV_FILE)."
		run "$BIN_DST" models demo --dir "$MODELS_DIR"
		run chown -R root:replyd "$MODELS_DIR"
		run chmod -R u=rwX,g=rX,o= "$MODELS_DIR"
		llm="${llm:-llm-demo.gguf}"
		whisper="${whisper:-whisper-demo.bin}"
	fi
	say "writing $ENV_FILE"
	write_file "$ENV_FILE" 0640 root:replyd <<EOF
# replyd configuration, read by systemd (EnvironmentFile=). Change it, then:
#   systemctl restart replyd
# Command-line flags override these; these override the built-in defaults.

# Listen address. A port below 1024 needs CAP_NET_BIND_SERVICE: re-run
# install.sh --addr to get the drop-in that grants it.
REPLYD_ADDR=$addr

# Where the bbolt file (keys, logs, settings) and TLS material live.
REPLYD_DATA_DIR=$DATA_DIR

# Models: see models/README.md and scripts/fetch-models.sh. Check them with
#   replyd models verify --dir $MODELS_DIR
REPLYD_LLM_MODEL=$MODELS_DIR/$llm
REPLYD_WHISPER_MODEL=$MODELS_DIR/$whisper
# Silero VAD (voice activity detection); without the file replyd runs with VAD off.
REPLYD_VAD_MODEL=$MODELS_DIR/silero_vad_v5.onnx

# TLS: off | auto (replyd's own certificate authority, kept in the data dir,
# signs the server certificate; tablets install its root from /tls/ca.pem) |
# on (needs REPLYD_TLS_CERT and REPLYD_TLS_KEY).
REPLYD_TLS=auto
#REPLYD_TLS_CERT=/etc/replyd/tls.crt
#REPLYD_TLS_KEY=/etc/replyd/tls.key

# The address tablets use (pairing links and QR codes; its host is added to
# the certificate), e.g. https://replyd.local:8080. Empty: the address the
# admin page was opened with.
#REPLYD_PUBLIC_URL=

# Web pages on other origins that may call /v1/infer (exact origins,
# comma-separated; * is refused).
#REPLYD_CORS_ORIGINS=

# How the admin's one-time login code is delivered:
# console | webhook | telegram | ntfy | gotify, or totp (an authenticator app,
# enrolled with POST /v1/admin/totp/enroll; nothing is sent). console writes
# the code to $DATA_DIR/otp-code.txt, readable only by replyd (never the journal).
#REPLYD_OTP_CHANNEL=console
#REPLYD_OTP_WEBHOOK_URL=http://127.0.0.1:9000/replyd-otp

# How long inference logs are kept.
#REPLYD_LOG_RETENTION=720h

# Several boxes sharing one PostgreSQL (docs/clustering.md): the database,
# this box's name, HAProxy's address.
#REPLYD_STORE_URL=postgres://replyd:PASSWORD@db.lan:5432/replyd?sslmode=verify-full&sslrootcert=/etc/replyd/db-ca.pem
#REPLYD_NODE_NAME=box-a
#REPLYD_TRUSTED_PROXIES=10.0.0.2

# The admin key. Leave unset: replyd generates one at first start and prints it
# ONCE to the journal (install.sh shows it). Reset it with:
#   systemctl stop replyd && sudo -u replyd REPLYD_DATA_DIR=$DATA_DIR $BIN_DST admin-key --reset && systemctl start replyd
#REPLYD_ADMIN_KEY=
EOF
fi

# ---- 5. unit -------------------------------------------------------------------
say "installing $UNIT_DST"
run install -m 0644 -o root -g root "$UNIT_SRC" "$UNIT_DST"
if [ "$port" -lt 1024 ]; then
	say "port $port < 1024: granting CAP_NET_BIND_SERVICE in $DROPIN"
	run install -d -m 0755 "$DROPIN_DIR"
	write_file "$DROPIN" 0644 root:root <<'EOF'
# Written by install.sh because REPLYD_ADDR uses a port below 1024.
[Service]
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
AmbientCapabilities=CAP_NET_BIND_SERVICE
EOF
elif [ -f "$DROPIN" ] || [ "$dry_run" -eq 1 ]; then
	run rm -f "$DROPIN"
fi
run systemctl daemon-reload

# m4a_report: the end of every run says whether M4A uploads work.
m4a_report() {
	if [ -n "$m4a_note" ]; then
		echo "  M4A/AAC uploads (iPads) are UNAVAILABLE: $m4a_note."
		echo "  They are answered 415 until ffmpeg is installed (apt-get install ffmpeg); other formats work."
	fi
}

if [ "$start" -eq 0 ]; then
	say "installed; not started (--no-start). Start with: systemctl enable --now replyd"
	m4a_report
	exit 0
fi

# ---- 6. start, wait, report -------------------------------------------------------
if [ "$dry_run" -eq 0 ] && systemctl is-active --quiet replyd; then
	say "replyd is running: restarting it on the new binary and unit"
	run systemctl enable replyd
	run systemctl restart replyd
else
	run systemctl enable --now replyd
fi

if [ "$dry_run" -eq 1 ]; then
	echo "+ wait up to ${HEALTH_WAIT_S}s for GET /healthz on 127.0.0.1:$port (https, then http)"
	echo "+ journalctl -u replyd | grep 'REPLYD ADMIN KEY:'  # printed once, at first start"
	echo "+ print https://<this machine's address>:$port/admin/"
	m4a_report
	exit 0
fi

scheme=""
for _ in $(seq "$HEALTH_WAIT_S"); do
	if curl -fsk --max-time 2 "https://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
		scheme=https
		break
	fi
	if curl -fs --max-time 2 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
		scheme=http
		break
	fi
	state="$(systemctl show -p ActiveState --value replyd 2>/dev/null || true)"
	if [ "$state" != active ] && [ "$state" != activating ] && [ "$state" != reloading ]; then
		journalctl -u replyd -n 30 --no-pager >&2 || true
		die "replyd is not running; the journal's last lines are above"
	fi
	sleep 1
done
if [ -z "$scheme" ]; then
	journalctl -u replyd -n 30 --no-pager >&2 || true
	die "replyd did not answer /healthz on port $port within ${HEALTH_WAIT_S}s"
fi

host="$(hostname -I 2>/dev/null | awk '{print $1}')"
host="${host:-127.0.0.1}"
key="$(journalctl -u replyd --no-pager -o cat 2>/dev/null | sed -n 's/.*REPLYD ADMIN KEY: *\([^[:space:]]*\).*/\1/p' | tail -n 1)"

echo
echo "replyd is running."
echo "  Admin page:        $scheme://$host:$port/admin/"
echo "  Conversation page: $scheme://$host:$port/app/"
if [ "$scheme" = https ]; then
	echo "  With REPLYD_TLS=auto, install replyd's root certificate on each tablet and"
	echo "  browser once: $scheme://$host:$port/tls/ca.pem (the browser warns until then)."
fi
if [ -n "$key" ]; then
	echo "  Admin key:  $key"
	echo "  Keep it somewhere safe: replyd stores only its hash. The journal holds this"
	echo "  line too (readable by root and the adm/systemd-journal groups only)."
elif [ -n "$(env_value REPLYD_ADMIN_KEY)" ]; then
	echo "  Admin key:  the one set as REPLYD_ADMIN_KEY in $ENV_FILE"
else
	echo "  Admin key:  not in the journal any more (it is printed once, at first start)."
	echo "  Reset it:   systemctl stop replyd && sudo -u replyd REPLYD_DATA_DIR=$DATA_DIR $BIN_DST admin-key --reset && systemctl start replyd"
fi
m4a_report
