// Package bench measures tapfwd on the namespace test bed: it starts the
// forwarder in several TAP configurations and its baselines (the Linux
// bridge, a direct veth, a naive water-based forwarder), drives iperf3,
// and reports medians with bootstrap intervals, ratios to the bridge, the
// IFF_NAPI on/off verdicts, and charts.
package bench
