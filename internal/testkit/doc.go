// Package testkit runs tapfwd for the end-to-end tests: its binary built
// once per test binary, started on a test bed and read back (its log, its
// HTTP endpoints, a command's exit and output, a service manager's notify
// socket, a unit's lines and setpriv's flags for its capabilities), a command
// run as on a kernel without AF_XDP sockets (WithoutXDPSockets), and
// the guards that skip or fail a test that lacks root or a
// tool.
//
// Only tests import it and its subpackages, one job each: traffic (frames,
// pings, floods, captures, a data server), kernel (the kernel's counters
// and /proc), prom (tapfwd's /metrics and a Prometheus server) and vm
// (QEMU guests, VM ports and a libvirtd). Every helper takes the test's
// testing.TB and fails or skips it on its own; none imports the benchmark
// (bench/).
package testkit
