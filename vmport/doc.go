// Package vmport puts VM ports (macvtap devices in bridge mode) on a TAP
// for guests to sit on, and keeps their device nodes under /dev/tapfwd.
package vmport
