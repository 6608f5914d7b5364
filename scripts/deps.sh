#!/usr/bin/env bash
# Installs what tapfwd's bench and tests need, when it is missing:
# iperf3 (traffic), iproute2 (ip, ss: the namespace test bed), ping, and
# Prometheus (promtool checks the rules; the server scrapes tapfwd in a test).
# Debian/Ubuntu packages through apt-get; run as root.
set -euo pipefail

declare -A pkg=([iperf3]=iperf3 [ip]=iproute2 [ss]=iproute2 [ping]=iputils-ping
	[promtool]=prometheus [prometheus]=prometheus [setpriv]=util-linux [ethtool]=ethtool)
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
apt-get install -y -qq --no-install-recommends "${uniq[@]}" >/dev/null
