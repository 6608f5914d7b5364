// Package throughput is the iperf3 experiment: tapfwd's TAP configurations
// against the baselines, with ratios to the bridge and IFF_NAPI verdicts.
// Package throughputview lays its reports out for reading.
package throughput
