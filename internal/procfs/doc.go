// Package procfs parses the /proc files the bench and the tests read: snmp,
// snmp6 and netstat counters, /proc/PID/stat, status and schedstat, the CPU model.
package procfs
