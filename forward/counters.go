package forward

import (
	"math/bits"
	"sync/atomic"
)

// DropReason says why a frame was not delivered.
type DropReason int

// The drop reasons. The set is fixed: metrics export one series per reason.
const (
	DropOversize     DropReason = iota // larger than a buffer (truncated by the kernel)
	DropBadHdr                         // malformed vnet header or headers that do not parse
	DropSegment                        // GSO segmentation failed
	DropTAPWrite                       // the TAP refused the write (EIO while it is down, ...); from a guest, also: the TAP queue's inbox was full
	DropNICRefused                     // the packet socket refused the frame (EINVAL, EMSGSIZE)
	DropNICBusy                        // the NIC queue was full (ENOBUFS, EAGAIN after waiting)
	DropNICRecv                        // recv consumed a frame it could not deliver (EINVAL, EFAULT)
	DropSpoofed                        // a source MAC its sender may not use: from the TAP none of StrictMACs, from a guest not its own, from the NIC one of the TAP side's or a guest's
	DropTAPRead                        // a TAP read failed after the kernel took the frame off its queue
	DropGuestVLAN                      // from the TAP with an 802.1Q/802.1ad tag (DenyGuestVLANs)
	DropL2Control                      // from the TAP to an IEEE 802.1D reserved group address (DropL2Control)
	DropGuestBusy                      // for a guest port whose inbox was full (the guest is slow)
	DropGuestRefused                   // for a guest port that took no frame (no front-end, buffers too small)
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	"oversize", "bad_vnet_hdr", "segmentation", "tap_write", "nic_refused", "nic_busy", "nic_recv", "spoofed_mac",
	"tap_read", "guest_vlan", "l2_control", "guest_busy", "guest_refused",
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

// Count counts frames and bytes.
type Count struct {
	Packets atomic.Uint64
	Bytes   atomic.Uint64
}

// Hist is a histogram of batch sizes (frames per wake-up).
type Hist struct {
	Buckets [HistBuckets]atomic.Uint64 // non-cumulative counts per bucket
	Count   atomic.Uint64              // batches
	Sum     atomic.Uint64              // frames in all batches
}

// Dir counts one direction: frames received from one device (Rx) and
// delivered to the other (Tx). Drops and errors belong to the direction of
// the device the frame was received from.
type Dir struct {
	Rx, Tx Count
	GSO    atomic.Uint64 // GSO super-frames among Rx
	Drops  [NumDropReasons]atomic.Uint64
	Errors atomic.Uint64 // unexpected syscall errors that did not stop the worker
	Batch  Hist
	// ToGuests counts frames received that went to guest ports alone
	// (GuestPort), not to the other device.
	ToGuests atomic.Uint64
}

// Counters are one queue's counters. Workers add to them once per batch;
// readers (metrics) load them at any time.
type Counters struct {
	NICToTAP, TAPToNIC Dir
	// Segments counts the frames userspace segmentation made (TAP without
	// a vnet header); Merged the frames userspace GRO folded into an earlier
	// frame of their flow.
	Segments, Merged atomic.Uint64
	_                [64]byte // keep the next queue's counters off this cache line
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
	gso, segs, merged, guests        uint64
	drops                            [NumDropReasons]uint64
	errors                           uint64
}

func (t *tally) drop(r DropReason) { t.drops[r]++ }

// sent counts frames as transmitted, each with hdr bytes of vnet header
// in front that are not its own.
func (t *tally) sent(frames [][]byte, hdr int) {
	for _, b := range frames {
		t.txPkts++
		t.txBytes += uint64(len(b) - hdr)
	}
}

// asCopies turns what t counted of copies of frames (another destination
// got each first) into what a copy counts: a failed one is an error, a
// delivered one is not the sender's transmission.
func (t *tally) asCopies() {
	for _, n := range t.drops {
		t.errors += n
	}
	t.drops = [NumDropReasons]uint64{}
	t.txPkts, t.txBytes = 0, 0
}

// publish adds the tally to d (its segments and merges to c, unless nil),
// records a batch of batch frames, and resets the tally.
func (t *tally) publish(d *Dir, c *Counters, batch int) {
	add(&d.Rx.Packets, t.rxPkts)
	add(&d.Rx.Bytes, t.rxBytes)
	add(&d.Tx.Packets, t.txPkts)
	add(&d.Tx.Bytes, t.txBytes)
	add(&d.GSO, t.gso)
	add(&d.ToGuests, t.guests)
	add(&d.Errors, t.errors)
	for i, n := range t.drops {
		add(&d.Drops[i], n)
	}
	if c != nil {
		add(&c.Segments, t.segs)
		add(&c.Merged, t.merged)
	}
	if batch > 0 {
		d.Batch.Buckets[bucket(batch)].Add(1)
		d.Batch.Count.Add(1)
		d.Batch.Sum.Add(uint64(batch))
	}
	*t = tally{}
}

// add adds n to c unless n is 0: a batch leaves most counters as they
// are, and an atomic add of 0 would still take their cache line.
func add(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Add(n)
	}
}

// DropReasons are the reasons a frame received from each device can be
// dropped for under the workers' configuration; the others never happen,
// so a reader (metrics) need not show them.
func (f *Forwarder) DropReasons() (fromNIC, fromTAP []DropReason) {
	// Segmentation: every GSO frame for a TAP without vnet header, and a
	// tunnel's GSO frames for any TAP.
	fromNIC = []DropReason{DropOversize, DropBadHdr, DropSegment, DropTAPWrite, DropNICRecv}
	if len(f.untrusted.ours) > 0 {
		fromNIC = append(fromNIC, DropSpoofed)
	}
	if f.sw != nil {
		fromNIC = append(fromNIC, DropGuestRefused) // a tunnel's GSO frame for a guest
	}
	fromTAP = []DropReason{DropOversize, DropBadHdr, DropNICRefused, DropNICBusy, DropTAPRead}
	if f.untrusted.tap != nil {
		fromTAP = append(fromTAP, DropSpoofed)
	}
	return fromNIC, f.untrusted.reasons(fromTAP)
}

// GuestDropReasons are the reasons a guest port's frames can be dropped for
// under the workers' configuration: fromGuest what the guest sent
// (GuestCounters.From), toGuest what was for it (GuestCounters.To).
func (f *Forwarder) GuestDropReasons() (fromGuest, toGuest []DropReason) {
	fromGuest = []DropReason{DropOversize, DropBadHdr, DropSpoofed, DropNICRefused, DropNICBusy, DropTAPWrite}
	if f.queues[0].tapHdr == 0 {
		fromGuest = append(fromGuest, DropSegment) // a GSO frame for a TAP without vnet header
	}
	fromGuest = f.untrusted.reasons(fromGuest)
	toGuest = []DropReason{DropGuestBusy, DropGuestRefused, DropSegment, DropBadHdr}
	return fromGuest, toGuest
}

// Merging reports whether userspace GRO is on.
func (f *Forwarder) Merging() bool { return f.queues[0].gro != nil }
