// Package iperf runs iperf3 across the namespace test bed (server in the lab
// namespace, client in the wire namespace) and parses its JSON report.
package iperf
