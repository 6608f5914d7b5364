// Package rr is the latency bench's load generator: UDP requests sent
// open-loop at a fixed rate, echoed, and timed into a histogram.
package rr
