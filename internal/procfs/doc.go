// Package procfs parses the /proc files the bench and the tests read: net counters
// (snmp, snmp6, netstat), /proc/stat CPU times, /proc/PID/{stat,status,schedstat}, the CPU model.
package procfs
