// Package latency is the latency experiment: request/response round trips
// (package rr) at fixed rates and application delays through tapfwd's
// polling modes and the Linux bridge, with the rates calibrated first.
package latency
