// Package prom reads tapfwd's Prometheus metrics for the end-to-end tests:
// the /metrics page parsed into counts, and a real Prometheus server
// started on a bed and queried. It is the one package of the kit that
// knows the metrics package's names.
package prom
