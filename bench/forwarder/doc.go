// Package forwarder runs the forwarder under test in a bed as a user would:
// `tapfwd run` with flags built from typed Options, or the naive baseline.
package forwarder
