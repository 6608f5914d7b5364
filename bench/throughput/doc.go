// Package throughput is the throughput experiment: iperf3 through tapfwd
// in several TAP configurations and through the baselines, with medians,
// bootstrap intervals, ratios to the bridge and IFF_NAPI verdicts.
package throughput
