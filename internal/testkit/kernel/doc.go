// Package kernel reads what the kernel counts for the end-to-end tests:
// netdev counters and addresses of a bed's devices, a namespace's SNMP
// counters, and a process's /proc status, threads, fds and CPU time.
package kernel
