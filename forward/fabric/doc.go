// Package fabric is the switch between a forwarder's guest ports, its TAP and
// the wire: guests found by destination MAC, addresses learned, bounded inboxes.
package fabric
