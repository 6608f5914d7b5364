// Package hostport gives the lab host its own port on a TAP, beside the VM
// ports: a macvlan in bridge mode carrying the host's address, the TAP under it quietened.
package hostport
