package daemon

import (
	"errors"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/metrics"
)

// xdpRings reads the ring counters of the NIC's AF_XDP sockets for
// /metrics: the kernel's (XDP_STATISTICS), a getsockopt per socket per
// scrape and none on the workers' path, and what afxdp's checks refused;
// it keeps what the sockets a reattach closed had counted.
type xdpRings struct {
	mu    sync.Mutex
	socks []ringSocket
	gone  map[int]ringCounts // by queue, of closed sockets
}

// ringSocket is what xdpRings reads of an *afxdp.Socket.
type ringSocket interface {
	Counters() (afxdp.Counters, error)
	Queue() int
}

// ringCounts is what metrics.XDPRing reports of a queue's sockets.
type ringCounts struct {
	kernel  unix.XDPStatistics
	refused afxdp.Refused
}

// add is r plus what c counted; the kernel's part only when ok (a closed
// socket's read fails, and its own counts stay readable).
func (r ringCounts) add(c afxdp.Counters, ok bool) ringCounts {
	if ok {
		r.kernel = addStats(r.kernel, c.Kernel)
	}
	a, b := r.refused, c.Refused
	r.refused = afxdp.Refused{RXDescs: a.RXDescs + b.RXDescs, CompAddrs: a.CompAddrs + b.CompAddrs,
		RingIndex: a.RingIndex + b.RingIndex, FillFull: a.FillFull + b.FillFull, Oversize: a.Oversize + b.Oversize}
	return r
}

// use reads socks from now on.
func (r *xdpRings) use(socks []*afxdp.Socket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.socks = make([]ringSocket, len(socks))
	for i, s := range socks {
		r.socks[i] = s
	}
}

// retire keeps what the sockets counted and stops reading them, before
// they close.
func (r *xdpRings) retire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.socks {
		c, err := s.Counters()
		if r.gone == nil {
			r.gone = map[int]ringCounts{}
		}
		r.gone[s.Queue()] = r.gone[s.Queue()].add(c, err == nil)
	}
	r.socks = nil
}

// read is metrics.Source.XDPRings: one entry per queue.
func (r *xdpRings) read() ([]metrics.XDPRing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := maps.Clone(r.gone)
	if total == nil {
		total = map[int]ringCounts{}
	}
	var errs []error
	for _, s := range r.socks {
		c, err := s.Counters()
		if err != nil {
			errs = append(errs, err)
		}
		total[s.Queue()] = total[s.Queue()].add(c, err == nil)
	}
	out := make([]metrics.XDPRing, 0, len(total))
	for _, q := range slices.Sorted(maps.Keys(total)) {
		k, f := total[q].kernel, total[q].refused
		out = append(out, metrics.XDPRing{Queue: q, RxDropped: k.Rx_dropped, RxInvalidDescs: k.Rx_invalid_descs,
			TxInvalidDescs: k.Tx_invalid_descs, RxRingFull: k.Rx_ring_full,
			RxFillRingEmptyDescs: k.Rx_fill_ring_empty_descs, TxRingEmptyDescs: k.Tx_ring_empty_descs,
			RefusedRxDescs: f.RXDescs, RefusedCompletions: f.CompAddrs, RefusedRingIndex: f.RingIndex,
			FillRingFull: f.FillFull, Oversize: f.Oversize})
	}
	return out, errors.Join(errs...)
}

func addStats(a, b unix.XDPStatistics) unix.XDPStatistics {
	return unix.XDPStatistics{Rx_dropped: a.Rx_dropped + b.Rx_dropped, Rx_invalid_descs: a.Rx_invalid_descs + b.Rx_invalid_descs,
		Tx_invalid_descs: a.Tx_invalid_descs + b.Tx_invalid_descs, Rx_ring_full: a.Rx_ring_full + b.Rx_ring_full,
		Rx_fill_ring_empty_descs: a.Rx_fill_ring_empty_descs + b.Rx_fill_ring_empty_descs,
		Tx_ring_empty_descs:      a.Tx_ring_empty_descs + b.Tx_ring_empty_descs}
}
