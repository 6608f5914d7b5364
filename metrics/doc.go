// Package metrics exports a forwarder's counters to Prometheus: per-queue
// frames, bytes and drops by reason, what was negotiated with the kernel,
// the kernel's own counters of the TAP, the NIC and the VM ports, and the
// AF_XDP rings'. Everything is read at scrape time, so the forwarding path
// never calls into it.
//
// A program that embeds the forwarder describes what to read in a Source
// and registers the Collector on a registry of its own:
//
//	c := metrics.NewCollector(metrics.Source{TAP: "tap0", NIC: "eth1", Forwarder: fwd})
//	reg := metrics.NewRegistry(c) // c, and Go's and the process's collectors
//	http.Handle("/metrics", metrics.Handler(reg, metrics.Limits{InFlight: 4, Timeout: 5 * time.Second}))
//
// or registers c on any prometheus.Registerer it already has. DropReasons
// lists the values of the "reason" label of the drop counters.
package metrics
