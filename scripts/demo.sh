#!/usr/bin/env bash
# The whole of tapfwd in a few minutes, on a lab of network namespaces
# (make demo runs it after scripts/deps.sh demo and make build):
#
#   wire namespace         fwd namespace                        lab namespace
#   w0 198.18.S.1 ---veth--- w1 == bin/tapfwd == TAP ------------- TAP 198.18.S.2
#                                                  VM port tfwvm0 - guest 198.18.S.11 (QEMU)
#   b0 198.19.S.1 ---veth--- b1 == br0 (Linux bridge) == b2 -veth- b3 198.19.S.2
#
# It starts the real bin/tapfwd with metrics and a VM port, boots the test
# guest (scripts/vmguest.sh) on that port under QEMU, pings the lab host and
# the guest from the wire, runs iperf3 through tapfwd and through the
# bridge, and shows tapfwd status and a few of its metrics. Everything it
# makes (namespaces, veths, the TAP, the VM port and its node under
# /dev/tapfwd, QEMU, iperf3, the temporary directory) is removed when it
# ends, also on Ctrl-C. Needs root. Addresses are from 198.18.0.0/15 only,
# and nothing outside the three namespaces is touched.
#
#   TAPFWD=path/to/tapfwd    the binary to run (default: bin/tapfwd)
#   DEMO_IPERF_SECONDS=N     length of each iperf3 run (default 3)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tapfwd=${TAPFWD:-$root/bin/tapfwd}
secs=${DEMO_IPERF_SECONDS:-3}

step=0
steps=8
say() {
	step=$((step + 1))
	echo "demo [$step/$steps] $*"
}
die() {
	echo "demo: $*" >&2
	exit 1
}
# indent CMD...: run CMD, its output indented under the step's line.
indent() {
	"$@" 2>&1 | sed 's/^/    /'
}

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, a TAP): run sudo make demo"
[ -x "$tapfwd" ] || die "no $tapfwd: run make demo (it builds it), or make build"
for cmd in ip iperf3 ping curl qemu-system-x86_64; do
	command -v "$cmd" >/dev/null 2>&1 || die "$cmd not found: run make demo (scripts/deps.sh demo installs it)"
done

id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
s=$((16#${id:0:2} % 254 + 1))
name=tfwdemo-$id
wire=$name-wire fwd=$name-fwd lab=$name-lab
tap=$name # the TAP, 14 bytes (at most 15)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
tapfwd_pid= qemu_pid= iperf_pid= dev=

cleanup() {
	local rc=$? left=() pid ns f
	trap '' INT TERM HUP
	set +e
	# 129, 130, 143: a signal, caught below or ending a command here
	# (set -e then exits with its status before the trap runs).
	case $rc in 129 | 130 | 143) echo "demo: interrupted" >&2 ;; esac
	echo "demo [$steps/$steps] clean up: stop tapfwd (SIGTERM), QEMU and iperf3, remove the namespaces"
	for pid in $qemu_pid $iperf_pid; do kill "$pid" 2>/dev/null; done
	if [ -n "$tapfwd_pid" ] && kill -TERM "$tapfwd_pid" 2>/dev/null; then
		# On SIGTERM tapfwd stops its workers, removes the VM port and its
		# node, and exits 0; the TAP goes with its last fd.
		for _ in $(seq 50); do kill -0 "$tapfwd_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$tapfwd_pid" 2>/dev/null
		wait "$tapfwd_pid"
		echo "    tapfwd exited with status $?; the TAP $(ip -n "$lab" link show "$tap" >/dev/null 2>&1 && echo "is still there" || echo "is gone"), the VM port's node $([ -e "$dev" ] && echo "is still there" || echo "is gone")"
	fi
	for pid in $qemu_pid $iperf_pid; do kill -KILL "$pid" 2>/dev/null; done
	wait 2>/dev/null
	for ns in "$wire" "$fwd" "$lab"; do
		[ -e "/run/netns/$ns" ] || continue
		# Whatever still runs in the lab's namespaces was started here.
		for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
		ip netns del "$ns"
	done
	# A node a killed tapfwd could not remove: its port went with the TAP.
	rm -f "/dev/tapfwd/$lab:"*
	rm -rf "$tmp"
	for ns in "$wire" "$fwd" "$lab"; do [ -e "/run/netns/$ns" ] && left+=("netns $ns"); done
	for f in "/dev/tapfwd/$lab:"*; do [ -e "$f" ] && left+=("$f"); done
	[ -e "$tmp" ] && left+=("$tmp")
	for pid in $tapfwd_pid $qemu_pid $iperf_pid; do kill -0 "$pid" 2>/dev/null && left+=("process $pid"); done
	if [ ${#left[@]} -gt 0 ]; then
		echo "demo: left behind: ${left[*]}" >&2
		[ "$rc" -ne 0 ] || rc=1
	else
		echo "    removed: namespaces $name-{wire,fwd,lab} with their veths and bridge, QEMU, iperf3, $tmp; nothing is left"
	fi
	[ "$rc" -ne 0 ] || echo "demo: done in $SECONDS s"
	exit "$rc"
}
trap cleanup EXIT
trap 'echo; exit 130' INT TERM HUP

# wait_for SECONDS DESCRIPTION CMD...: run CMD every 0.2 s until it
# succeeds; fail after SECONDS.
wait_for() {
	local secs=$1 what=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "$what: not after $secs s"
}

say "lab: namespaces $wire, $fwd, $lab; wire 198.18.$s.1 and lab 198.18.$s.2 through tapfwd, 198.19.$s.1 and 198.19.$s.2 through a Linux bridge"
for ns in "$wire" "$fwd" "$lab"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
# The veths are made inside the namespaces (the peer moved by "netns"), so
# none appears in this host's namespace even for a moment.
ip -n "$wire" link add w0 type veth peer name w1 netns "$fwd"
ip -n "$wire" addr add "198.18.$s.1/24" dev w0
ip -n "$wire" link add b0 type veth peer name b1 netns "$fwd"
ip -n "$wire" addr add "198.19.$s.1/24" dev b0
ip -n "$lab" link add b3 type veth peer name b2 netns "$fwd"
ip -n "$lab" addr add "198.19.$s.2/24" dev b3
ip -n "$fwd" link add br0 type bridge
ip -n "$fwd" link set b1 master br0
ip -n "$fwd" link set b2 master br0
for l in w0 b0; do ip -n "$wire" link set "$l" up; done
for l in w1 b1 b2 br0; do ip -n "$fwd" link set "$l" up; done
ip -n "$lab" link set b3 up

say "tapfwd: $tapfwd run --nic w1 --tap $tap --tap-netns $lab --tap-addr 198.18.$s.2/24 --vm-ports 1 (in $fwd, metrics at 127.0.0.1:9310)"
mkfifo "$tmp/ready"
# In a session of its own, so that a Ctrl-C reaches only this script,
# whose clean-up stops tapfwd (a second signal would make it exit at once).
setsid ip netns exec "$fwd" "$tapfwd" run --nic w1 --tap "$tap" --tap-netns "$lab" --tap-addr "198.18.$s.2/24" \
	--vm-ports 1 --metrics-addr 127.0.0.1:9310 --ready-fd 3 3>"$tmp/ready" >"$tmp/tapfwd.log" 2>&1 &
tapfwd_pid=$!
# tapfwd writes READY=1 to fd 3 once every worker runs, or exits.
if ! read -r -t 30 ready <"$tmp/ready" || [ "${ready%% *}" != READY=1 ]; then
	cat "$tmp/tapfwd.log" >&2
	die "tapfwd did not start"
fi
grep -E 'msg="?(forwarding|vm-port)' "$tmp/tapfwd.log" | sed 's/^time=[^ ]* /    /'
port=$(sed -n 's/.*msg=vm-port name=\([^ ]*\) .*/\1/p' "$tmp/tapfwd.log" | head -1)
mac=$(sed -n 's/.*msg=vm-port .* mac=\([0-9a-f:]*\).*/\1/p' "$tmp/tapfwd.log" | head -1)
dev=/dev/tapfwd/$lab:$port
[ -n "$port" ] && [ -n "$mac" ] && [ -c "$dev" ] || die "no VM port in tapfwd's log: $(cat "$tmp/tapfwd.log")"

guest=$("$root/scripts/vmguest.sh")
say "guest: the test guest ($guest) under QEMU (TCG) on VM port $port, MAC $mac, address 198.18.$s.11"
# The port's node is opened as fd 3 and handed to -netdev tap,fd=3. QEMU
# runs in the lab namespace (it needs no network of its own), in a session
# of its own as tapfwd does.
setsid ip netns exec "$lab" qemu-system-x86_64 -accel tcg -m 256 -nodefaults -no-user-config -display none \
	-serial "file:$tmp/console" -no-reboot -kernel "$guest/vmlinuz" -initrd "$guest/initrd.img" \
	-append "console=ttyS0 panic=-1 quiet tfw.addr=198.18.$s.11/24 tfw.gw=198.18.$s.1" \
	-netdev tap,id=n0,fd=3 -device "virtio-net-pci,netdev=n0,mac=$mac" 3<>"$dev" >"$tmp/qemu.log" 2>&1 &
qemu_pid=$!
booted=$SECONDS
for ((i = 0; i < 600; i++)); do
	grep -q "TFW: done" "$tmp/console" 2>/dev/null && break
	kill -0 "$qemu_pid" 2>/dev/null || die "QEMU exited: $(cat "$tmp/qemu.log" "$tmp/console" 2>/dev/null)"
	sleep 0.2
done
grep -q "TFW: ping 198.18.$s.1 ok" "$tmp/console" 2>/dev/null ||
	die "the guest did not reach the wire in 120 s: $(cat "$tmp/console" 2>/dev/null)"
grep -E '^TFW: (eth0|ping)' "$tmp/console" | tr -d '\r' | sed 's/^/    guest console: /'
echo "    the guest booted and pinged the wire host through tapfwd, $((SECONDS - booted)) s after QEMU started"

say "ping from the wire: the lab host (198.18.$s.2, the TAP) and the guest (198.18.$s.11, on the VM port)"
for dst in "198.18.$s.2" "198.18.$s.11"; do
	ip netns exec "$wire" ping -c 3 -i 0.2 -W 2 "$dst" | tail -2 | sed "s/^/    $dst: /"
done

say "iperf3 TCP, wire -> lab, ${secs} s each (1 s more left out), through tapfwd and through the Linux bridge"
setsid ip netns exec "$lab" iperf3 -s --logfile "$tmp/iperf3-server.log" </dev/null >/dev/null 2>&1 &
iperf_pid=$!
wait_for 10 "the iperf3 server" ip netns exec "$lab" ss -Htln sport = :5201
for path in tapfwd bridge; do
	if [ "$path" = tapfwd ]; then dst=198.18.$s.2; else dst=198.19.$s.2; fi
	ip netns exec "$wire" timeout -k 2 $((secs + 20)) iperf3 -c "$dst" -t "$secs" -O 1 -f g --connect-timeout 5000 \
		>"$tmp/iperf3-$path.log" 2>&1 || die "iperf3 through $path failed: $(cat "$tmp/iperf3-$path.log")"
	# The receiver's line: "[  5]   0.00-3.00  sec  1.52 GBytes  4.35 Gbits/sec  receiver".
	gbit=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Gbits/sec") print $i }' "$tmp/iperf3-$path.log" | tail -1)
	[ -n "$gbit" ] || die "no receiver line from iperf3: $(cat "$tmp/iperf3-$path.log")"
	printf '    %-26s %6s Gbit/s\n' "through $([ $path = tapfwd ] && echo tapfwd || echo a Linux bridge):" "$gbit"
done
echo "    (a few seconds on whatever else this machine runs: make bench measures it properly)"

say "tapfwd status (in $fwd, where tapfwd serves it)"
indent ip netns exec "$fwd" timeout 10 "$tapfwd" status

say "curl -s http://127.0.0.1:9310/metrics | grep ^tapfwd_ (a few of the series)"
ip netns exec "$fwd" curl -sS --max-time 5 http://127.0.0.1:9310/metrics >"$tmp/metrics"
grep -E '^tapfwd_(packets_total|vm_port_packets_total|tap_info|queue_info)' "$tmp/metrics" | sed 's/^/    /'
echo "    ... $(grep -c '^tapfwd_' "$tmp/metrics") tapfwd_ series in all"
