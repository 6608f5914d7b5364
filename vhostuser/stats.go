package vhostuser

import "sync/atomic"

// Stats are a port's counters since Listen. "Tx" is the guest's transmit
// queue (frames Read returns), "Rx" its receive queue (frames Write gives).
type Stats struct {
	// TxFrames, TxBytes: frames Read returned and the bytes of them it
	// copied, headers not counted (a frame cut short by its buffer counts
	// what fit: a chain's claimed length, with descriptors that overlap
	// in guest memory, is no measure of what it carried).
	TxFrames, TxBytes uint64
	// TxDropped: frames the guest transmitted that Read did not return:
	// shorter than the virtio-net header, longer than a 64 KiB frame with
	// its headers, too long a chain, or sent while the ring was disabled.
	TxDropped         uint64
	RxFrames, RxBytes uint64 // frames (and bytes) Write put on the guest's receive queue
	// RxNoRoom: Write found no receive buffer (EAGAIN; not when it did
	// its share of work).
	RxNoRoom uint64
	// RxRefused: frames Write refused: an offload the guest did not
	// negotiate (EOPNOTSUPP), larger than its buffers or than 1024 of
	// their descriptors take (EMSGSIZE), or malformed (EINVAL).
	RxRefused      uint64
	Interrupts     uint64 // used-buffer notifications sent (call eventfd signals)
	GuestErrors    uint64 // times the guest broke the rules and the port stopped
	ProtocolErrors uint64 // front-ends sent away for breaking the protocol
	Connects       uint64
	Disconnects    uint64
	EventsDropped  uint64 // events OnEvent was too slow to take
}

type counters struct {
	txFrames, txBytes, txDropped            atomic.Uint64
	rxFrames, rxBytes, rxNoRoom, rxRefused  atomic.Uint64
	interrupts, guestErrors, protocolErrors atomic.Uint64
	connects, disconnects, eventsDropped    atomic.Uint64
}

// Stats returns the port's counters; it may be called at any time.
func (p *Port) Stats() Stats {
	c := &p.stats
	return Stats{
		TxFrames: c.txFrames.Load(), TxBytes: c.txBytes.Load(), TxDropped: c.txDropped.Load(),
		RxFrames: c.rxFrames.Load(), RxBytes: c.rxBytes.Load(), RxNoRoom: c.rxNoRoom.Load(),
		RxRefused: c.rxRefused.Load(), Interrupts: c.interrupts.Load(), GuestErrors: c.guestErrors.Load(),
		ProtocolErrors: c.protocolErrors.Load(), Connects: c.connects.Load(), Disconnects: c.disconnects.Load(),
		EventsDropped: c.eventsDropped.Load(),
	}
}

// tally is one batch's counts, added to the counters once.
type tally struct {
	frames, bytes, dropped, noRoom, refused, irqs uint64
}

func (c *counters) addTx(t *tally) {
	if t.frames != 0 {
		c.txFrames.Add(t.frames)
		c.txBytes.Add(t.bytes)
	}
	if t.dropped != 0 {
		c.txDropped.Add(t.dropped)
	}
	if t.irqs != 0 {
		c.interrupts.Add(t.irqs)
	}
}

func (c *counters) addRx(t *tally) {
	if t.frames != 0 {
		c.rxFrames.Add(t.frames)
		c.rxBytes.Add(t.bytes)
	}
	if t.noRoom != 0 {
		c.rxNoRoom.Add(t.noRoom)
	}
	if t.refused != 0 {
		c.rxRefused.Add(t.refused)
	}
	if t.irqs != 0 {
		c.interrupts.Add(t.irqs)
	}
}
