#!/usr/bin/env bash
# Builds the lab guest for tapfwd's VM tests: the Debian distribution kernel
# (linux-image-cloud-amd64 by default) and a busybox initramfs that loads the
# virtio-net modules, configures eth0 from the kernel command line, pings and
# moves data over TCP, and reports on the serial console (lines "TFW: ...").
#
# Prints the directory holding vmlinuz and initrd.img. Builds are cached
# under ${XDG_CACHE_HOME:-~/.cache}/tapfwd/vmguest (TAPFWD_VMGUEST_CACHE
# overrides it), keyed by the kernel and busybox package versions and this
# script's hash; a cached build is reused without touching the network.
# Needs apt-get and dpkg-deb (Debian/Ubuntu); downloading needs no root, but
# run `apt-get update` first on a fresh machine.
#
#   TAPFWD_VMGUEST_KERNEL=linux-image-amd64 scripts/vmguest.sh   # another kernel
#
# Guest command line (all optional except tfw.addr or tfw.dhcp):
#   tfw.addr=198.18.X.Y/24  eth0's address
#   tfw.dhcp=1              get eth0's address by DHCP instead (busybox
#                           udhcpc), reported as "TFW: dhcp ADDR/BITS"
#                           ("TFW: dhcp FAIL" without a lease)
#   tfw.gw=198.18.X.1       the wire host: pinged, and the TCP peer
#   tfw.ping=A,B            more addresses to ping (other guests, the host)
#   tfw.peer=ADDR           the TCP peer instead of gw (the lab host)
#   tfw.tx=PORT             send tfw.mib MiB of random data to peer:PORT
#   tfw.rx=PORT             receive from peer:PORT until the peer closes
#   tfw.mib=N               MiB to send (default 4)
#   tfw.halt=1              power off when done (default: stay up)
#   tfw.pingi=SECS          at the end, ping gw every SECS seconds for good,
#                           one "seq=N" line each on the console, while a
#                           watcher reports every change of eth0's carrier
#                           ("TFW: eth0 carrier=1"; "carrier=gone" if eth0
#                           disappears)
set -euo pipefail

kpkg=${TAPFWD_VMGUEST_KERNEL:-linux-image-cloud-amd64}
cache=${TAPFWD_VMGUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tapfwd/vmguest}
# Modules the guest loads (dependencies are added in load order). Those the
# kernel has built in (modules.builtin) are skipped.
want_modules=(virtio_pci virtio_net)

die() { echo "vmguest: $*" >&2; exit 1; }

self_hash=$(sha256sum "$0" | cut -c1-12)

# pkgfield PKG FIELD: a field of the candidate version of PKG; empty when
# apt-cache does not know PKG.
pkgfield() {
	{ apt-cache show --no-all-versions "$1" 2>/dev/null || true; } | sed -n "/^$2: /{s///p;q}"
}

resolve() {
	real=$kpkg
	# A metapackage (linux-image-amd64) depends on the real image package.
	local dep
	dep=$(pkgfield "$kpkg" Depends | tr ',' '\n' | sed -n '/^ *linux-image-/{s/^ *\(linux-image-[^ ]*\).*/\1/p;q}')
	[ -n "$dep" ] && real=$dep
	kver=$(pkgfield "$real" Version)
	bbver=$(pkgfield busybox-static Version)
}

newest_cached() {
	{ ls -1dt "$cache"/*/ 2>/dev/null || true; } | while read -r d; do
		if [ -f "$d/vmlinuz" ] && [ -f "$d/initrd.img" ]; then
			echo "${d%/}"
			break
		fi
	done
}

command -v apt-cache >/dev/null 2>&1 || die "apt-cache not found: this script builds the guest from Debian packages"
resolve
if [ -z "$kver" ] || [ -z "$bbver" ]; then
	# No package lists (offline, or apt-get update never ran): use the
	# newest build there is.
	d=$(newest_cached)
	[ -n "$d" ] || die "cannot resolve $kpkg or busybox-static with apt-cache: run apt-get update (as root) first"
	echo "vmguest: apt-cache cannot resolve $kpkg/busybox-static; using cached $d" >&2
	echo "$d"
	exit 0
fi
key="${real}_${kver}-busybox_${bbver}-${self_hash}"
key=${key//[^A-Za-z0-9._+-]/_}
out="$cache/$key"
if [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "vmguest: building $key" >&2
(
	cd "$work"
	# As root apt-get would drop to _apt, which cannot write here.
	apt-get -q -o APT::Sandbox::User=root download "$real" busybox-static >&2 ||
		die "apt-get download $real busybox-static failed: run apt-get update, and check that a Debian mirror is reachable"
)
mkdir -p "$work/k" "$work/bb"
dpkg-deb -x "$work"/linux-image-*.deb "$work/k"
dpkg-deb -x "$work"/busybox-static_*.deb "$work/bb"
shopt -s nullglob
kernels=("$work"/k/boot/vmlinuz-*)
[ ${#kernels[@]} -gt 0 ] || die "no vmlinuz in $real"
vmlinuz=${kernels[0]}
moddirs=("$work"/k/lib/modules/*/ "$work"/k/usr/lib/modules/*/)
[ ${#moddirs[@]} -gt 0 ] || die "no lib/modules in $real"
moddir=${moddirs[0]}
shopt -u nullglob
bb="$work/bb/bin/busybox"
[ -x "$bb" ] || die "no bin/busybox in busybox-static"

root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc,lib/modules}
cp "$bb" "$root/bin/busybox"
for app in $("$bb" --list); do
	[ "$app" = busybox ] || ln -s busybox "$root/bin/$app"
done

# Module load order: depth-first over each module's "depends=" (its
# .modinfo), dependencies first. The package has no modules.dep (depmod
# runs at install time).
declare -A seen=()
order=()
find_ko() { find "$moddir" \( -name "$1.ko" -o -name "$1.ko.xz" -o -name "$1.ko.zst" -o -name "$1.ko.gz" \) -print -quit; }
add_module() {
	local m=${1//-/_} f deps d
	[ -n "${seen[$m]:-}" ] && return 0
	seen[$m]=1
	f=$(find_ko "$m")
	if [ -z "$f" ]; then
		f=$(find_ko "${1//_/-}")
	fi
	if [ -z "$f" ]; then
		grep -qE "/${m//_/[_-]}\.ko$" "$moddir/modules.builtin" 2>/dev/null && return 0
		die "module $m is neither in $real nor built in"
	fi
	case $f in
	*.xz) xz -dc "$f" >"$work/$m.ko" ;;
	*.zst) zstd -qdc "$f" >"$work/$m.ko" ;;
	*.gz) gzip -dc "$f" >"$work/$m.ko" ;;
	*) cp "$f" "$work/$m.ko" ;;
	esac
	deps=$(grep -a -o -m1 'depends=[A-Za-z0-9_,-]*' "$work/$m.ko" | cut -d= -f2 | tr ',' ' ' || true)
	for d in $deps; do add_module "$d"; done
	cp "$work/$m.ko" "$root/lib/modules/$m.ko"
	order+=("$m.ko")
}
for m in "${want_modules[@]}"; do add_module "$m"; done
printf '%s\n' "${order[@]}" >"$root/etc/tfw-modules"

cat >"$root/init" <<'EOF'
#!/bin/sh
# tapfwd lab guest init (scripts/vmguest.sh): see the tfw.* parameters there.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
say() { echo "TFW: $*"; }
for m in $(cat /etc/tfw-modules); do
	insmod "/lib/modules/$m" || say "insmod $m failed"
done
addr= gw= pings= txport= rxport= mib=4 halt=0 pingi= dhcp= peer=
for w in $(cat /proc/cmdline); do
	case $w in
	tfw.addr=*) addr=${w#*=} ;;
	tfw.dhcp=*) dhcp=${w#*=} ;;
	tfw.peer=*) peer=${w#*=} ;;
	tfw.gw=*) gw=${w#*=} ;;
	tfw.ping=*) pings=$(echo "${w#*=}" | tr , ' ') ;;
	tfw.tx=*) txport=${w#*=} ;;
	tfw.rx=*) rxport=${w#*=} ;;
	tfw.mib=*) mib=${w#*=} ;;
	tfw.halt=*) halt=${w#*=} ;;
	tfw.pingi=*) pingi=${w#*=} ;;
	esac
done
finish() {
	say "done"
	[ "$halt" = 1 ] && poweroff -f
	if [ -n "$pingi" ] && [ -n "$gw" ]; then
		watch_carrier &
		exec ping -i "$pingi" "$gw"
	fi
	exec sleep 2147483647
}
watch_carrier() {
	last=
	while :; do
		c=$(cat /sys/class/net/eth0/carrier 2>/dev/null || echo gone)
		[ "$c" != "$last" ] && say "eth0 carrier=$c"
		last=$c
		usleep 100000
	done
}
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if [ ! -e /sys/class/net/eth0 ]; then
	say "no eth0 FAIL"
	finish
fi
ip link set lo up
ip link set eth0 up
[ -n "$addr" ] && ip addr add "$addr" dev eth0
if [ "$dhcp" = 1 ]; then
	# Up to 60 discovers a second apart; the script applies the lease.
	if udhcpc -i eth0 -f -q -n -t 60 -T 1 -A 1 -s /bin/tfw-dhcp >/dev/null 2>&1 && [ -s /tmp/dhcp-addr ]; then
		addr=$(cat /tmp/dhcp-addr)
		say "dhcp $addr"
	else
		say "dhcp FAIL"
	fi
fi
[ -n "$peer" ] || peer=$gw
say "eth0 mac=$(cat /sys/class/net/eth0/address) addr=$addr"
for d in /sys/bus/virtio/devices/*; do
	# Device id 1 is virtio-net; features is one 0/1 character per bit.
	[ "$(cat "$d/device")" = 0x0001 ] && say "virtio-net features=$(cat "$d/features")"
done
for ip in $gw $pings; do
	n=0
	until ping -c 1 -W 1 "$ip" >/dev/null 2>&1; do
		n=$((n + 1))
		[ $n -ge 60 ] && break
	done
	if [ $n -lt 60 ]; then say "ping $ip ok"; else say "ping $ip FAIL"; fi
done
if [ -n "$peer" ] && [ -n "$txport" ]; then
	dd if=/dev/urandom of=/tmp/tx bs=1048576 count="$mib" 2>/dev/null
	sum=$(sha256sum /tmp/tx | cut -d' ' -f1)
	if timeout 120 nc "$peer" "$txport" </tmp/tx >/dev/null; then r=ok; else r=FAIL; fi
	say "tx $r bytes=$(wc -c </tmp/tx) sha256=$sum"
	rm -f /tmp/tx
fi
if [ -n "$peer" ] && [ -n "$rxport" ]; then
	if timeout 120 nc "$peer" "$rxport" </dev/null >/tmp/rx; then r=ok; else r=FAIL; fi
	say "rx $r bytes=$(wc -c </tmp/rx) sha256=$(sha256sum /tmp/rx | cut -d' ' -f1)"
	rm -f /tmp/rx
fi
finish
EOF
chmod 755 "$root/init"

# udhcpc's script (tfw.dhcp=1): applies the lease to eth0 and leaves it in
# /tmp/dhcp-addr for init.
cat >"$root/bin/tfw-dhcp" <<'EOF'
#!/bin/sh
# udhcpc calls this with deconfig, bound, renew, leasefail or nak; the
# lease is in the environment (ip, and mask: the prefix length).
case $1 in
deconfig) ip addr flush dev "$interface" ;;
bound | renew)
	ip addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	echo "$ip/${mask:-24}" >/tmp/dhcp-addr
	;;
esac
exit 0
EOF
chmod 755 "$root/bin/tfw-dhcp"

(cd "$root" && find . | sort | "$bb" cpio -o -H newc -R 0:0 2>/dev/null) | gzip -6 >"$work/initrd.img"
cp "$vmlinuz" "$work/vmlinuz"
{
	echo "kernel=$real $kver"
	echo "busybox=busybox-static $bbver"
	echo "modules=${order[*]}"
} >"$work/info"

stage="$cache/.stage.$$"
mkdir "$stage"
mv "$work/vmlinuz" "$work/initrd.img" "$work/info" "$stage/"
# Another build may have finished meanwhile: keep the first.
if ! mv -T "$stage" "$out" 2>/dev/null; then
	rm -rf "$stage"
fi
# Keep the two newest builds.
{ ls -1dt "$cache"/*/ 2>/dev/null || true; } | tail -n +3 | while read -r d; do rm -rf "$d"; done
echo "$out"
