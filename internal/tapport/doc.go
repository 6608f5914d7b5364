// Package tapport puts ports on a TAP, in the TAP's namespace:
//
//   - VM ports: macvtap devices in bridge mode (Add, AddN, Ensure, List,
//     Del, Remove, Sweep), each with a device node under DevDir that a
//     guest's QEMU opens, owned by the user it runs as;
//   - the lab host's own port: a macvlan in bridge mode that carries the
//     host's address, the TAP under it quietened (EnsureHost, FindHost,
//     RemoveHost).
//
// Both kinds share the checks on what a port is given, the MAC it gets, the
// link's creation and the quietening of a device (no ARP or NDP answers of
// its own, no reverse-path filter), and one typed error, *Error, whose Kind
// callers test with errors.Is. Messages name the TAP, port and namespace,
// never a package or a flag: the caller adds what it was doing.
package tapport
