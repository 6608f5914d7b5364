package forward

import (
	"math/bits"
	"sync/atomic"
)

// DropReason says why a frame was not delivered.
type DropReason int

// The drop reasons. The set is fixed: metrics export one series per reason.
const (
	DropOversize   DropReason = iota // larger than a buffer (truncated by the kernel)
	DropBadHdr                       // malformed vnet header or headers that do not parse
	DropSegment                      // GSO segmentation failed
	DropTAPWrite                     // the TAP refused the write (EIO while it is down, ...)
	DropNICRefused                   // the packet socket refused the frame (EINVAL, EMSGSIZE)
	DropNICBusy                      // the NIC queue was full (ENOBUFS, EAGAIN after waiting)
	DropNICRecv                      // recv consumed a frame it could not deliver (EINVAL)
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	"oversize", "bad_vnet_hdr", "segmentation", "tap_write", "nic_refused", "nic_busy", "nic_recv",
}

func (r DropReason) String() string {
	if r < 0 || r >= NumDropReasons {
		return "unknown"
	}
	return dropNames[r]
}

// HistBuckets is the number of batch-size histogram buckets: batch sizes
// 1, 2, 3-4, 5-8, ..., 129-256 (upper bounds 1, 2, 4, ..., 256).
const HistBuckets = 9

// BucketBound is the upper bound of histogram bucket i.
func BucketBound(i int) int { return 1 << i }

// Side counts one direction of one device.
type Side struct {
	Packets atomic.Uint64
	Bytes   atomic.Uint64
}

// Counters are one queue's counters. Workers add to them once per batch;
// readers (metrics) load them at any time.
type Counters struct {
	NICRx, TAPTx, TAPRx, NICTx Side
	// GSOFromNIC counts GSO super-frames received from the NIC, GSOFromTAP
	// those read from the TAP; Segments counts the frames segmentation made.
	GSOFromNIC, GSOFromTAP, Segments atomic.Uint64
	Drops                            [NumDropReasons]atomic.Uint64
	// Errors counts unexpected syscall errors that did not stop the worker.
	Errors atomic.Uint64
	// Batch-size histograms, frames per wake-up, per direction.
	NICToTAPBatch, TAPToNICBatch [HistBuckets]atomic.Uint64
	_                            [64]byte // keep the next queue's counters off this cache line
}

func bucket(n int) int {
	if n <= 1 {
		return 0
	}
	b := bits.Len(uint(n - 1))
	return min(b, HistBuckets-1)
}

// tally accumulates one batch locally before it is published.
type tally struct {
	rxPkts, rxBytes, txPkts, txBytes uint64
	gso, segs                        uint64
	drops                            [NumDropReasons]uint64
	errors                           uint64
}

func (t *tally) drop(r DropReason) { t.drops[r]++ }

func (t *tally) publish(rx, tx *Side, gso *atomic.Uint64, c *Counters, hist *[HistBuckets]atomic.Uint64, batch int) {
	if t.rxPkts != 0 {
		rx.Packets.Add(t.rxPkts)
		rx.Bytes.Add(t.rxBytes)
	}
	if t.txPkts != 0 {
		tx.Packets.Add(t.txPkts)
		tx.Bytes.Add(t.txBytes)
	}
	if t.gso != 0 {
		gso.Add(t.gso)
	}
	if t.segs != 0 {
		c.Segments.Add(t.segs)
	}
	for i, d := range t.drops {
		if d != 0 {
			c.Drops[i].Add(d)
		}
	}
	if t.errors != 0 {
		c.Errors.Add(t.errors)
	}
	if batch > 0 {
		hist[bucket(batch)].Add(1)
	}
	*t = tally{}
}
