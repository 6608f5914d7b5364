// Package procfs parses the /proc files the bench and the tests read: the
// /proc/net/snmp counter layout, /proc/PID/stat, /proc/PID/status and the
// CPU model in /proc/cpuinfo. It parses; callers decide which file (and in
// which network namespace) to read.
package procfs
