// Package testbed builds the network namespaces that tapfwd tests and
// benchmarks run in, starts a forwarder in them, and removes them: the
// single-host bed (wire / fwd / lab) and the two-host bed (two hosts joined
// by an underlay veth, each with a VXLAN device and a lab of its own).
//
// Every bed gets a random suffix, so beds can run in parallel and a crashed
// run never blocks the next one. Addresses come only from 198.18.0.0/15
// (RFC 2544) and live only on interfaces inside the bed's own namespaces; the
// host's interfaces, routes and sysctls are never touched. veth offloads are
// left at their defaults (TSO, GSO, checksum offload on), as users have them.
package testbed
