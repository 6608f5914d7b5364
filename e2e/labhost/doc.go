// Package labhost tests the tapfwd binary giving the lab host its own port
// on the TAP: host and guests reaching each other, DHCP from it, the view
// from the wire, and a persistent lab that keeps and adopts it.
package labhost
