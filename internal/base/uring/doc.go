// Package uring is the little of io_uring that batched TAP I/O needs, on golang.org/x/sys/unix:
// a ring with its mmapped submission and completion queues, probing, and batches of reads or writes on one fd.
package uring
