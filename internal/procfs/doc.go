// Package procfs parses the /proc files the bench and the tests read:
// /proc/net/snmp counters, /proc/PID/stat and status, the CPU model.
package procfs
