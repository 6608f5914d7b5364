// Package dhcp runs the lab segment's DHCP server: Debian's dnsmasq on the
// lab host's port, DHCP only, with its lease file under /run/tapfwd/dhcp.
package dhcp
