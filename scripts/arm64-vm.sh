#!/usr/bin/env bash
# arm64-vm.sh: runs a shell script inside a whole emulated arm64 machine
# (qemu-system-aarch64 -M virt -cpu cortex-a76, the Raspberry Pi 5's core:
# NEON, fp16, dotprod), not under qemu-user, where arm64 programs hang at
# their first pthread_create on these hosts (docs/development.md).
#
#   arm64-vm.sh [--timeout S] [--share TAG=DIR]... [--libs-for ELF]... \
#               --out DIR SCRIPT
#
# The machine is Debian's own arm64 kernel (linux-image-arm64) with an
# initramfs holding busybox-static:arm64 as its /init, the 9p modules, and
# the shared libraries that the --libs-for programs need (the loader,
# libc, libstdc++, libgomp, the threaded arm64 OpenBLAS...: their NEEDED
# entries, followed through aarch64-linux-gnu-readelf). Both packages are
# fetched with `apt-get download` into $ARM64_VM_CACHE (default
# ~/.cache/replyd/arm64-vm) and unpacked with dpkg-deb -x: never installed
# (the kernel package's hooks would run on the host, and busybox-static:arm64
# conflicts with the host's busybox). scripts/deps.sh arm64 installs
# qemu-system-arm and cpio and adds the arm64 architecture apt needs.
#
# Each --share DIR is a read-only virtio 9p share mounted at /mnt/TAG; DIR of
# --out is the writable share /mnt/out, where SCRIPT is copied and run by
# busybox sh (cwd /mnt/out, HOME and TMPDIR /tmp, a tmpfs). What SCRIPT
# prints goes to the console, which is this script's standard output and
# DIR/console.log; the guest prints `ARM64-VM-EXIT <status>` after SCRIPT
# and powers off (QEMU then exits 0). The exit status is SCRIPT's; a guest
# that does not power off within --timeout seconds (default 3600) is killed
# and the run fails (124), and so does one whose console never says
# ARM64-VM-EXIT (125). ARM64_VM_SMP (2) and ARM64_VM_MEM (4096 MiB) size
# the machine; QEMU runs under nice -n 15 (the dev box is shared).
set -euo pipefail

timeout=3600
shares=()
libs_for=()
out=""
while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) timeout="$2"; shift 2 ;;
	--share) shares+=("$2"); shift 2 ;;
	--libs-for) libs_for+=("$2"); shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--) shift; break ;;
	-*) echo "arm64-vm: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
if [ $# -ne 1 ] || [ -z "$out" ]; then sed -n '7,8p' "$0" >&2; exit 2; fi
script="$1"
for t in qemu-system-aarch64 cpio aarch64-linux-gnu-readelf dpkg-deb apt-get; do
	command -v "$t" >/dev/null || { echo "arm64-vm: $t is missing: scripts/deps.sh arm64 installs it" >&2; exit 2; }
done

cache="${ARM64_VM_CACHE:-$HOME/.cache/replyd/arm64-vm}"
mkdir -p "$cache"

# fetch_debs: the kernel (the package linux-image-arm64 depends on) and
# busybox-static, unpacked into $cache/root once.
fetch_debs() {
	[ -f "$cache/root/bin/busybox" ] && compgen -G "$cache/root/boot/vmlinuz-*" >/dev/null && return 0
	local dl
	dl="$(mktemp -d "$cache/dl.XXXXXX")"
	# apt-get download writes into the current folder; as root it warns that
	# _apt cannot write there, which is harmless.
	(cd "$dl" && apt-get download linux-image-arm64:arm64 busybox-static:arm64 2>&1 | grep -v unsandboxed) >&2 || {
		echo "arm64-vm: apt-get download failed: run scripts/deps.sh arm64 (it adds the arm64 architecture)" >&2
		rm -rf "$dl"
		return 1
	}
	# linux-image-arm64 is a metapackage: the kernel is its dependency.
	local image
	image="$(dpkg-deb -f "$dl"/linux-image-arm64_*.deb Depends | tr ',' '\n' | sed -n 's/^ *\(linux-image-[0-9][^ ]*\).*/\1/p' | head -1)"
	[ -n "$image" ] || { echo "arm64-vm: no kernel package in linux-image-arm64's Depends" >&2; return 1; }
	(cd "$dl" && apt-get download "$image:arm64" 2>&1 | grep -v unsandboxed) >&2
	rm -rf "$cache/root.new"
	mkdir -p "$cache/root.new"
	dpkg-deb -x "$dl/$(cd "$dl" && ls "$image"_*.deb)" "$cache/root.new"
	dpkg-deb -x "$(ls "$dl"/busybox-static_*.deb)" "$cache/root.new"
	rm -rf "$cache/root"
	mv "$cache/root.new" "$cache/root"
	rm -rf "$dl"
	echo "arm64-vm: unpacked $image and busybox-static into $cache/root" >&2
}
fetch_debs
kernel="$(find "$cache/root/boot" -name 'vmlinuz-*' | head -1)"
kver="${kernel##*/vmlinuz-}"
moddir="$cache/root/lib/modules/$kver"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
ird="$stage/initramfs"
mkdir -p "$ird"/{bin,lib,etc,proc,sys,dev,tmp,mnt,lib/modules}
cp "$cache/root/bin/busybox" "$ird/bin/busybox"

# Modules, in dependency order (each module's .modinfo depends= field: the
# package has no modules.dep, which depmod writes at install time): virtio
# over PCI (-M virt's virtio-9p-pci), and 9p over virtio.
declare -A seen=()
modorder=()
addmod() {
	local m="$1" f d
	[ -n "${seen[$m]:-}" ] && return 0
	seen[$m]=1
	f="$(find "$moddir/kernel" -name "$m.ko" | head -1)"
	[ -n "$f" ] || { echo "arm64-vm: module $m is not in $kver (built in?)" >&2; return 1; }
	for d in $(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | tr ',' ' '); do addmod "$d"; done
	cp "$f" "$ird/lib/modules/"
	modorder+=("$m")
}
for m in virtio_pci 9pnet_virtio 9p; do addmod "$m"; done
printf '%s\n' "${modorder[@]}" >"$ird/lib/modules/order"

# Shared libraries: the multiarch arm64 packages (libopenblas0-pthread...)
# first, then the cross toolchain's own (libstdc++, libgomp).
libdirs=(/usr/lib/aarch64-linux-gnu /lib/aarch64-linux-gnu /usr/aarch64-linux-gnu/lib)
declare -A haslib=()
addlibs() { # addlibs ELF: copies ELF's NEEDED libraries and theirs into /lib
	local n d p
	for n in $(aarch64-linux-gnu-readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
		[ -n "${haslib[$n]:-}" ] && continue
		p=""
		for d in "${libdirs[@]}"; do [ -e "$d/$n" ] && { p="$d/$n"; break; }; done
		[ -n "$p" ] || { echo "arm64-vm: $n (needed by $1) not found in ${libdirs[*]}" >&2; return 1; }
		haslib[$n]=1
		cp -L "$p" "$ird/lib/$n"
		addlibs "$ird/lib/$n"
	done
}
for f in "${libs_for[@]+"${libs_for[@]}"}"; do
	addlibs "$f"
	interp="$(aarch64-linux-gnu-readelf -l "$f" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')"
	if [ -n "$interp" ] && [ ! -e "$ird$interp" ]; then
		mkdir -p "$ird$(dirname "$interp")"
		for d in "${libdirs[@]}"; do [ -e "$d/${interp##*/}" ] && { cp -L "$d/${interp##*/}" "$ird$interp"; break; }; done
		[ -e "$ird$interp" ] || { echo "arm64-vm: the loader $interp not found" >&2; exit 1; }
	fi
done

printf '127.0.0.1 localhost\n::1 localhost\n' >"$ird/etc/hosts"
printf 'root:x:0:0:root:/tmp:/bin/sh\n' >"$ird/etc/passwd"
printf 'root:x:0:\n' >"$ird/etc/group"
tags=()
for s in "${shares[@]+"${shares[@]}"}"; do tags+=("${s%%=*}"); done
printf '%s\n' "${tags[@]+"${tags[@]}"}" out >"$ird/etc/shares"
cat >"$ird/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs -o size=75% tmp /tmp
for m in $(cat /lib/modules/order); do insmod "/lib/modules/$m.ko" || echo "ARM64-VM: insmod $m failed"; done
ifconfig lo 127.0.0.1 up
for t in $(cat /etc/shares); do
	mkdir -p "/mnt/$t"
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose "$t" "/mnt/$t" || echo "ARM64-VM: mounting $t failed"
done
cd /mnt/out && sh /mnt/out/guest.sh
echo "ARM64-VM-EXIT $?"
sync
poweroff -f
EOF
chmod +x "$ird/init"
(cd "$ird" && find . | cpio -o -H newc --quiet) >"$stage/initramfs.cpio"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
cp "$script" "$out/guest.sh"
args=(-M virt -cpu cortex-a76 -smp "${ARM64_VM_SMP:-2}" -m "${ARM64_VM_MEM:-4096}" -nographic -no-reboot
	-kernel "$kernel" -initrd "$stage/initramfs.cpio" -append "console=ttyAMA0 quiet panic=-1"
	-nic none)
i=0
for s in "${shares[@]+"${shares[@]}"}"; do
	args+=(-fsdev "local,id=fs$i,path=$(cd "${s#*=}" && pwd),security_model=none,readonly=on"
		-device "virtio-9p-pci,fsdev=fs$i,mount_tag=${s%%=*}")
	i=$((i + 1))
done
args+=(-fsdev "local,id=fsout,path=$out,security_model=none" -device "virtio-9p-pci,fsdev=fsout,mount_tag=out")

echo "arm64-vm: booting $kver on qemu-system-aarch64 -cpu cortex-a76 -smp ${ARM64_VM_SMP:-2} (timeout ${timeout} s)" >&2
set +e
timeout -s KILL "$timeout" nice -n 15 qemu-system-aarch64 "${args[@]}" </dev/null 2>&1 | sed -u 's/\r//g' | tee "$out/console.log"
rc="${PIPESTATUS[0]}"
set -e
if [ "$rc" -eq 137 ]; then
	echo "arm64-vm: the guest did not power off within $timeout s: killed" >&2
	exit 124
fi
status="$(sed -n 's/^ARM64-VM-EXIT \([0-9]*\)$/\1/p' "$out/console.log" | tail -1)"
if [ -z "$status" ]; then
	echo "arm64-vm: the guest stopped without finishing its script (no ARM64-VM-EXIT on the console; QEMU $rc)" >&2
	exit 125
fi
exit "$status"
