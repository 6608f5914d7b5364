// Package daemon runs one tapfwd forwarder: it opens the TAP, the NIC's
// sockets, the VM ports and the workers from a Config, serves metrics and status, and undoes it all.
package daemon
