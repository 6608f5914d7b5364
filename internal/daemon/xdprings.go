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

// xdpRings reads the ring counters (XDP_STATISTICS) of the NIC's AF_XDP
// sockets for /metrics, a getsockopt per socket per scrape and none on the
// workers' path, keeping what the sockets a reattach closed had counted.
type xdpRings struct {
	mu    sync.Mutex
	socks []*afxdp.Socket
	gone  map[int]unix.XDPStatistics // by queue, of closed sockets
}

// use reads socks from now on.
func (r *xdpRings) use(socks []*afxdp.Socket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.socks = socks
}

// retire keeps what the sockets counted and stops reading them, before
// they close.
func (r *xdpRings) retire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.socks {
		c, err := s.Counters()
		if err != nil {
			continue
		}
		if r.gone == nil {
			r.gone = map[int]unix.XDPStatistics{}
		}
		r.gone[s.Queue()] = addStats(r.gone[s.Queue()], c.Kernel)
	}
	r.socks = nil
}

// read is metrics.Source.XDPRings: one entry per queue.
func (r *xdpRings) read() ([]metrics.XDPRing, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := map[int]unix.XDPStatistics{}
	for q, k := range r.gone {
		total[q] = k
	}
	var errs []error
	for _, s := range r.socks {
		c, err := s.Counters()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		total[s.Queue()] = addStats(total[s.Queue()], c.Kernel)
	}
	out := make([]metrics.XDPRing, 0, len(total))
	for _, q := range slices.Sorted(maps.Keys(total)) {
		k := total[q]
		out = append(out, metrics.XDPRing{Queue: q, RxDropped: k.Rx_dropped, RxInvalidDescs: k.Rx_invalid_descs,
			TxInvalidDescs: k.Tx_invalid_descs, RxRingFull: k.Rx_ring_full,
			RxFillRingEmptyDescs: k.Rx_fill_ring_empty_descs, TxRingEmptyDescs: k.Tx_ring_empty_descs})
	}
	return out, errors.Join(errs...)
}

func addStats(a, b unix.XDPStatistics) unix.XDPStatistics {
	return unix.XDPStatistics{Rx_dropped: a.Rx_dropped + b.Rx_dropped, Rx_invalid_descs: a.Rx_invalid_descs + b.Rx_invalid_descs,
		Tx_invalid_descs: a.Tx_invalid_descs + b.Tx_invalid_descs, Rx_ring_full: a.Rx_ring_full + b.Rx_ring_full,
		Rx_fill_ring_empty_descs: a.Rx_fill_ring_empty_descs + b.Rx_fill_ring_empty_descs,
		Tx_ring_empty_descs:      a.Tx_ring_empty_descs + b.Tx_ring_empty_descs}
}
