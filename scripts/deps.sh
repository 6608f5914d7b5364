#!/usr/bin/env bash
# Installs what tapfwd's bench (deps.sh bench), its demo (deps.sh demo) or
# its tests (deps.sh test, the default) need, when it is missing. The
# bench: iperf3 (traffic), iproute2 (ip, ss: the namespace test bed) and
# Open vSwitch (openvswitch-switch: the userspace peer the bench compares
# with; the bench starts its daemons itself, so the package's service is
# kept from starting).
# The demo also: ping, curl (it reads /metrics), QEMU and the test guest
# (scripts/vmguest.sh, cached under ~/.cache/tapfwd/vmguest). The tests
# also: ethtool, Prometheus (promtool checks the rules; the server scrapes
# tapfwd in a test), systemd-analyze (checks the unit), setpriv, libvirt
# (libvirtd, its QEMU driver and virsh: the libvirt test, which starts its
# own libvirtd), dnsmasq (dnsmasq-base: the DHCP tests) and DPDK's testpmd
# (dpdk-dev; stdbuf from coreutils: the vhost-user tests with a second real
# front-end).
# Debian/Ubuntu packages through apt-get; run as root.
set -euo pipefail

what=${1:-test}
case $what in
bench | demo | test) ;;
*)
	echo "usage: deps.sh [bench|demo|test]" >&2
	exit 2
	;;
esac
declare -A pkg=([iperf3]=iperf3 [ip]=iproute2 [ss]=iproute2 [ovs-vswitchd]=openvswitch-switch)
if [ "$what" != bench ]; then
	pkg+=([ping]=iputils-ping [curl]=curl [qemu-system-x86_64]=qemu-system-x86)
fi
if [ "$what" = test ]; then
	pkg+=([promtool]=prometheus [prometheus]=prometheus [setpriv]=util-linux
		[ethtool]=ethtool [systemd-analyze]=systemd
		[libvirtd]=libvirt-daemon [virsh]=libvirt-clients [dnsmasq]=dnsmasq-base
		[dpdk-testpmd]=dpdk-dev [stdbuf]=coreutils)
fi
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done

updated=
if [ ${#missing[@]} -gt 0 ]; then
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "deps: missing ${missing[*]} and no apt-get: install them with your package manager" >&2
		exit 1
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps: missing ${missing[*]}: run as root (or: sudo apt-get install ${missing[*]})" >&2
		exit 1
	fi
	mapfile -t uniq < <(printf '%s\n' "${missing[@]}" | sort -u)
	echo "deps: installing ${uniq[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	updated=1
	# No package's service starts: Open vSwitch's would run a system-wide
	# switch the bench must not touch. policy-rc.d is removed afterwards
	# unless it was there before.
	norc=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		norc=1
	fi
	status=0
	apt-get install -y -qq --no-install-recommends "${uniq[@]}" >/dev/null || status=$?
	[ -z "$norc" ] || rm -f /usr/sbin/policy-rc.d
	[ "$status" -eq 0 ] || exit "$status"
fi

[ "$what" != bench ] || exit 0

if [ "$what" = test ]; then
	# libvirtd's QEMU driver is a package of its own; without
	# libvirt-daemon-system (which needs systemd) nothing makes the user
	# libvirtd checks for at start, or its directories: do what that package's
	# postinst does. The test mounts private directories over these.
	if [ ! -e /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so ] &&
		! ls /usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so >/dev/null 2>&1; then
		echo "deps: installing libvirt-daemon-driver-qemu" >&2
		[ -n "$updated" ] || apt-get update -qq
		updated=1
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libvirt-daemon-driver-qemu >/dev/null
	fi
	getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
	getent passwd libvirt-qemu >/dev/null ||
		useradd --system --gid libvirt-qemu --home-dir /var/lib/libvirt --no-create-home --shell /usr/sbin/nologin libvirt-qemu
	mkdir -p /etc/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt
fi

# The guest of the demo and the lab-VM tests (e2e/macvtap TestVMGuests).
vmguest="$(dirname "$0")/vmguest.sh"
if ! "$vmguest" >/dev/null; then
	if [ -z "$updated" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get update -qq
		"$vmguest" >/dev/null
	else
		echo "deps: building the VM test guest failed: run apt-get update as root, then scripts/vmguest.sh" >&2
		exit 1
	fi
fi
