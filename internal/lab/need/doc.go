// Package need is the tests' guard for what a test needs from the machine
// besides Go: the tools they run (iperf3, QEMU, dnsmasq, dpdk-testpmd,
// Prometheus...), each named with the Debian package that installs it.
// Outside CI a test that misses one is skipped, saying what to install, so
// that `go test ./...` passes on any machine; in CI (CI=true, which .ci/run
// sets) or with TAPFWD_REQUIRE_TOOLS=1 it fails, so that a test whose
// tool went missing cannot pass silently where it must run.
package need
