package vhostuser

import "time"

// SetLogLimits makes the ports Listen makes from now on pass burst lines
// of a kind per interval; it returns a function that restores the limits.
func SetLogLimits(burst int, interval time.Duration) (restore func()) {
	old := logLimits
	logLimits.burst, logLimits.interval = burst, interval
	return func() { logLimits = old }
}
