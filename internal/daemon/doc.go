// Package daemon runs one tapfwd forwarder from a Config: the TAP, the NIC's
// sockets, VM ports, workers, metrics and status, opened in order and undone.
package daemon
