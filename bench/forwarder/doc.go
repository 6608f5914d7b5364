// Package forwarder starts the forwarder under test in a bed, as a user
// would: the tapfwd binary with `run` and its flags (built from Options), or
// the naive baseline; it waits until the lab answers and stops it with
// SIGTERM.
package forwarder
