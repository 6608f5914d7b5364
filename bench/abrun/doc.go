// Package abrun makes one run of tapfwd's in-run A/B mode for the in-run
// comparison: iperf3 across a bed while the bench switches tapfwd between the
// TAP's two queues (its arms) window by window on a seeded ABBA/BAAB
// schedule, through the control FIFO tapfwd reads, and a probe reads at
// each bin of every window the bytes and frames tapfwd wrote into the TAP
// and the CPU time of every thread of the run (Role), from schedstat.
// The run's Record holds its windows and what else it did: switches, retransmits, reordering, the background load.
package abrun
