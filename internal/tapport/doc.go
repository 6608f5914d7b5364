// Package tapport is what the ports stacked on a TAP share (package vmport's
// macvtaps, package hostport's macvlan): finding the TAP, picking a MAC,
// creating and bringing up the link, quietening a device, and their typed errors.
package tapport
