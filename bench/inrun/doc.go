// Package inrun compares two TAP settings inside one run: IFF_NAPI off
// against IFF_NAPI on (or against the TAP's NAPI threaded) on two queues
// of one TAP, which one tapfwd worker writes in turn, switched every
// 100 ms by the bench in seeded ABBA/BAAB blocks.
//
// A run of one workload gives a series of windows, each split into bins
// at 20 and 40 ms after the switch, counted at the forwarder: the bytes
// and frames tapfwd wrote into the TAP, and the CPU time of every thread
// of the run (tapfwd's, the TAP's NAPI kthread, ksoftirqd, both iperf3
// processes), read from schedstat. A run's estimate is the log ratio of
// the arms' summed rates, or of their CPU per byte at a fixed offered
// rate; runs are the replicates of the interval (Stein's two-stage rule
// across runs), so the
// slow noise of a shared machine, which moves both arms alike within a
// run, cancels. Every report carries its own checks: an A/A comparison
// (two queues, neither with IFF_NAPI), a positive control (a delay
// injected on one arm, per 1,500 bytes of every frame), the estimate
// under guards of 0, 20 and 40 ms, retransmits and reordering around switches, the background load of
// each run, and the kernel's view of the two queues (the NAPI kthreads).
//
// Each run is made apart, one A/B run with its probe.
// docs/design/ab-method.md explains the estimator and its coverage.
package inrun
