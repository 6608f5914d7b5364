// Package trace records beside a run's figure what can tell a slow run from a fast one:
// where the busy threads ran, softirqs per CPU, the TCP counters, the TAP's NAPI state.
package trace
