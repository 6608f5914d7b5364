package vhostuser

import "sync/atomic"

// Stats are a port's or a queue pair's counters since Listen. "Tx" is the
// guest's transmit queue (frames Read returns), "Rx" its receive queue
// (frames Write gives). A Queue's carry the first group only; a Port's
// add up its queues' and carry the second group too.
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
	RxRefused  uint64
	Interrupts uint64 // used-buffer notifications sent (call eventfd signals)

	GuestErrors uint64 // times the guest broke the rules and the port stopped
	// ProtocolErrors: the front-end's breaks of the protocol: each that
	// sent it away, and each ring beyond the port's or on another ring's
	// memory it set up (refused, the connection kept).
	ProtocolErrors uint64
	Connects       uint64
	Disconnects    uint64
	TurnedAway     uint64 // front-ends that connected while another was served
	Resets         uint64 // times the first queue pair stopped running (the guest's driver reset the device)
	EventsDropped  uint64 // events OnEvent was too slow to take
	// MemoryOverBudget: front-ends sent away or turned away because the
	// guest memory the port alone holds was over Config.MemoryBudget.
	MemoryOverBudget uint64
}

// queueCounters are a queue pair's data path counters.
type queueCounters struct {
	txFrames, txBytes, txDropped           atomic.Uint64
	rxFrames, rxBytes, rxNoRoom, rxRefused atomic.Uint64
	interrupts                             atomic.Uint64
}

// portCounters are a port's own.
type portCounters struct {
	guestErrors, protocolErrors, connects, disconnects atomic.Uint64
	turnedAway, resets, eventsDropped                  atomic.Uint64
	memoryOverBudget                                   atomic.Uint64
}

// Stats returns the queue pair's counters; it may be called at any time.
func (q *Queue) Stats() Stats {
	c := &q.stats
	return Stats{
		TxFrames: c.txFrames.Load(), TxBytes: c.txBytes.Load(), TxDropped: c.txDropped.Load(),
		RxFrames: c.rxFrames.Load(), RxBytes: c.rxBytes.Load(), RxNoRoom: c.rxNoRoom.Load(),
		RxRefused: c.rxRefused.Load(), Interrupts: c.interrupts.Load(),
	}
}

// Stats returns the port's counters, its queue pairs' added up; it may be
// called at any time.
func (p *Port) Stats() Stats {
	var s Stats
	for _, q := range p.queues {
		qs := q.Stats()
		s.TxFrames, s.TxBytes, s.TxDropped = s.TxFrames+qs.TxFrames, s.TxBytes+qs.TxBytes, s.TxDropped+qs.TxDropped
		s.RxFrames, s.RxBytes, s.RxNoRoom = s.RxFrames+qs.RxFrames, s.RxBytes+qs.RxBytes, s.RxNoRoom+qs.RxNoRoom
		s.RxRefused, s.Interrupts = s.RxRefused+qs.RxRefused, s.Interrupts+qs.Interrupts
	}
	c := &p.stats
	s.GuestErrors, s.ProtocolErrors = c.guestErrors.Load(), c.protocolErrors.Load()
	s.Connects, s.Disconnects, s.TurnedAway = c.connects.Load(), c.disconnects.Load(), c.turnedAway.Load()
	s.Resets, s.EventsDropped = c.resets.Load(), c.eventsDropped.Load()
	s.MemoryOverBudget = c.memoryOverBudget.Load()
	return s
}

// tally is one batch's counts, added to the counters once.
type tally struct {
	frames, bytes, dropped, noRoom, refused, irqs uint64
}

func (c *queueCounters) addTx(t *tally) {
	add(&c.txFrames, t.frames)
	add(&c.txBytes, t.bytes)
	add(&c.txDropped, t.dropped)
	add(&c.interrupts, t.irqs)
}

func (c *queueCounters) addRx(t *tally) {
	add(&c.rxFrames, t.frames)
	add(&c.rxBytes, t.bytes)
	add(&c.rxNoRoom, t.noRoom)
	add(&c.rxRefused, t.refused)
	add(&c.interrupts, t.irqs)
}

// add adds n to c unless n is 0: what a batch did not do costs it no
// locked add, and the counters' cache line no trip between CPUs.
func add(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Add(n)
	}
}
