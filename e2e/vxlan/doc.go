// Package vxlan tests the tapfwd binary across two hosts: one on each
// host's VXLAN device joins the two labs into one segment, and a real
// Prometheus scrapes both forwarders with the repository's rules.
package vxlan
