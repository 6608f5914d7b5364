// Package abtap is the bench's in-run A/B mode of a TAP: one worker's
// endpoint over two queues of one TAP, opened with different settings,
// whose writes go to the queue ("arm") a controller picks through a FIFO.
package abtap
