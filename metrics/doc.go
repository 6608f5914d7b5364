// Package metrics exports tapfwd's per-queue counters, what was negotiated
// with the kernel and the kernel's own drop counters to Prometheus, reading
// everything at scrape time so the forwarding path never calls into it.
package metrics
