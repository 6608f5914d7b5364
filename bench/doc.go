// Package bench measures tapfwd on the namespace test bed: it starts the
// forwarder and its baselines, drives iperf3, and reports medians and ratios.
package bench
