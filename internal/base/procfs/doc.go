// Package procfs parses the /proc files tapfwd, the bench and the tests read: net counters, CPU times,
// /proc/PID/{stat,status,schedstat,cmdline}, the CPU model, packet sockets and the processes holding them.
package procfs
