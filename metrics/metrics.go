package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/buildinfo"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// Source is what the collector reads.
type Source struct {
	TAP, NIC string // device names, the values of the "device" label
	// NICBackend is the kind of socket on the NIC ("packet", "xdp"), and
	// XDPMode how its XDP program is attached ("native", "generic";
	// empty without one): tapfwd_nic_info.
	NICBackend, XDPMode string
	Features            tap.Features
	// Forwarder is the workers whose counters are read.
	Forwarder *forward.Forwarder
	// LinkStats reads a device's kernel counters (rtnetlink); nil leaves
	// out the tapfwd_netdev_* metrics.
	LinkStats func(device string) (netns.LinkStats, error)
	// VMPorts lists the VM ports (macvtap) on the TAP, read with LinkStats;
	// nil leaves out their tapfwd_vm_port_* series.
	VMPorts func() ([]string, error)
	// GuestPorts are the vhost-user VM ports, whose counters are their
	// workers' (Forwarder.Guests); exported in the tapfwd_vm_port_*
	// families beside the macvtaps'.
	GuestPorts []GuestPort
	// XDPRings reads the ring counters of the NIC's AF_XDP sockets, once
	// per scrape; nil leaves out tapfwd_xdp_ring_events_total.
	XDPRings func() ([]XDPRing, error)
}

// XDPRing is the counters of one NIC queue's AF_XDP socket: the kernel's
// (XDP_STATISTICS), as struct xdp_statistics names them, and what afxdp's
// own checks refused (afxdp.Refused).
type XDPRing struct {
	Queue                                                 int
	RxDropped, RxInvalidDescs, TxInvalidDescs, RxRingFull uint64
	RxFillRingEmptyDescs, TxRingEmptyDescs                uint64
	// RefusedRxDescs: RX descriptors outside the UMEM's RX chunks, not
	// the kernel's, past a chunk or in a broken chain; RefusedCompletions:
	// completion addresses outside the TX chunks or not the kernel's;
	// RefusedRingIndex: ring indexes claiming more entries than the ring
	// has; FillRingFull: RX chunks the fill ring had no room for;
	// Oversize: frames longer than the worker's buffer.
	RefusedRxDescs, RefusedCompletions, RefusedRingIndex, FillRingFull, Oversize uint64
}

// GuestPort is one vhost-user VM port.
type GuestPort struct {
	Name  string                 // the "port" label
	State func() vhostuser.State // where it stands now
	Guest *forward.GuestWorker   // its worker, whose counters are read
	// Stats reads the port's own counters, for its events; nil leaves
	// out its tapfwd_vm_port_events_total series.
	Stats func() vhostuser.Stats
}

// NetdevReason is the drop reason of a macvtap VM port's drops: the
// kernel's own counters of its netdev (rx_dropped, tx_dropped).
const NetdevReason = "netdev"

// PortReason is the drop reason of the frames a vhost-user port dropped
// itself, before its worker saw them (vhostuser.Stats.TxDropped): chains
// shorter than the virtio-net header or longer than a 64 KiB frame, too
// long a chain, or sent while the ring was disabled.
const PortReason = "port"

// KernelRing is the drop reason for frames the kernel dropped because a
// packet socket's receive queue was full (PACKET_STATISTICS tp_drops).
const KernelRing = "kernel_ring"

// DropReasons lists every value of the "reason" label, in a fixed order.
func DropReasons() []string {
	r := []string{KernelRing}
	for i := forward.DropReason(0); i < forward.NumDropReasons; i++ {
		r = append(r, i.String())
	}
	return r
}

const ns = "tapfwd"

// Direction label values: "rx" is what tapfwd (or a VM port, or the
// kernel's netdev) took from the device, "tx" what it handed to it.
const (
	rx = "rx"
	tx = "tx"
)

var (
	dq  = []string{"device", "queue"}
	dqd = []string{"device", "queue", "direction"}

	packets   = prometheus.NewDesc(ns+"_packets_total", "Frames tapfwd took from the device (direction rx: read from the TAP, received on the NIC's packet socket) or handed to it (tx; GSO super-frames count once, segments each).", dqd, nil)
	bytes     = prometheus.NewDesc(ns+"_bytes_total", "Bytes of those Ethernet frames, vnet headers excluded.", dqd, nil)
	drops     = prometheus.NewDesc(ns+"_drops_total", "Frames received from the device that were not delivered, by reason (only the reasons that can happen under this configuration).", []string{"device", "queue", "reason"}, nil)
	errs      = prometheus.NewDesc(ns+"_errors_total", "Unexpected syscall errors on the device's fd that did not stop the worker.", dq, nil)
	gso       = prometheus.NewDesc(ns+"_gso_frames_total", "GSO super-frames received from the device.", dq, nil)
	segments  = prometheus.NewDesc(ns+"_segments_total", "Frames made by userspace GSO segmentation and written to the TAP: of every GSO frame for a TAP without vnet header, and of GSO frames from inside a tunnel (which a vnet header cannot describe) for any TAP.", dq, nil)
	merged    = prometheus.NewDesc(ns+"_gro_merged_frames_total", "Frames received from the device that userspace GRO folded into an earlier frame of their flow (only with GRO on).", dq, nil)
	toGuests  = prometheus.NewDesc(ns+"_to_guests_frames_total", "Frames received from the device that went to vhost-user guest ports alone, not to the other device (only with vhost-user ports).", dq, nil)
	batch     = prometheus.NewDesc(ns+"_batch_frames", "Frames read from the device per wake-up of the queue's worker.", dq, nil)
	nicInfo   = prometheus.NewDesc(ns+"_nic_info", "The sockets on the NIC: backend packet (AF_PACKET) or xdp (AF_XDP), and how the XDP program is attached.", []string{"device", "backend", "xdp_mode"}, nil)
	tapInfo   = prometheus.NewDesc(ns+"_tap_info", "What was negotiated with the kernel for the TAP.", []string{"device", "napi", "vnet_hdr", "multi_queue", "offloads"}, nil)
	queueInfo = prometheus.NewDesc(ns+"_queue_info", "The CPU the worker that reads the device's queue is pinned to now (-1: not pinned): one worker per queue, or one per direction with --split-directions; it changes when the worker follows its load.", []string{"device", "queue", "cpu"}, nil)
	moves     = prometheus.NewDesc(ns+"_queue_moves_total", "Times the queue's worker moved to another CPU to follow its load (--follow-load).", []string{"queue"}, nil)
	buildInfo = prometheus.NewDesc(ns+"_build_info", "tapfwd's version, VCS revision and Go version.", []string{"version", "revision", "goversion"}, nil)
	ndDrops   = prometheus.NewDesc(ns+"_netdev_drops_total", "The kernel's own drop counters of the device (rx_dropped, tx_dropped): for the TAP, rx counts frames tapfwd wrote that the kernel dropped, tx frames the lab sent that tapfwd did not read (or sent while no tapfwd was attached).", []string{"device", "direction"}, nil)
	dpd       = []string{"device", "port", "direction"}
	vmPackets = prometheus.NewDesc(ns+"_vm_port_packets_total", "Frames of a VM port: rx handed to its guest, tx the guest sent (a macvtap's netdev counters; a vhost-user port's worker).", dpd, nil)
	vmBytes   = prometheus.NewDesc(ns+"_vm_port_bytes_total", "Bytes of those frames.", dpd, nil)
	vmDrops   = prometheus.NewDesc(ns+"_vm_port_drops_total", "Frames of a VM port dropped, by reason: rx toward the guest, tx from it (reason netdev: a macvtap's rx_dropped and tx_dropped; a vhost-user port's by tapfwd_drops_total's reasons, and port: frames the port dropped itself before its worker saw them).", []string{"device", "port", "direction", "reason"}, nil)
	vmGSO     = prometheus.NewDesc(ns+"_vm_port_gso_frames_total", "GSO super-frames a vhost-user port's guest sent.", []string{"device", "port"}, nil)
	vmEvents  = prometheus.NewDesc(ns+"_vm_port_events_total", "What happened to a vhost-user port's connection: connect and disconnect of a front-end, protocol_error (a front-end sent away for breaking the vhost-user protocol, or a ring beyond the port's refused), turned_away (a front-end that came while another was served), reset (the guest's driver reset the device).", []string{"device", "port", "event"}, nil)
	vmState   = prometheus.NewDesc(ns+"_vm_port_state", "1 for the state a vhost-user port is in, 0 for the others: listening (no front-end), connected, running (frames move), broken (the guest broke the virtqueue rules).", []string{"device", "port", "state"}, nil)
	xdpRing   = prometheus.NewDesc(ns+"_xdp_ring_events_total", "The counters of the AF_XDP socket on a NIC queue, by event. First the kernel's (XDP_STATISTICS): rx_dropped (frames dropped on the way in: no fill ring entry, or too large) and rx_ring_full (frames dropped for a full RX ring), both also in tapfwd_drops_total's kernel_ring; rx_invalid_descs and tx_invalid_descs (descriptors the kernel refused); rx_fill_ring_empty_descs and tx_ring_empty_descs (times the kernel found the fill or TX ring empty). Then what tapfwd's own checks of the rings refused: refused_rx_descs (RX descriptors outside the RX chunks, not the kernel's, past a chunk or in a broken multi-buffer chain: dropped, in no other of tapfwd's counters), refused_completions (completion addresses outside the TX chunks or not the kernel's), refused_ring_index (ring indexes claiming more entries than the ring has), fill_ring_full (RX chunks the fill ring had no room for, lost to the socket) and oversize (frames longer than a worker's buffer, also in tapfwd_drops_total's oversize).", []string{"device", "queue", "event"}, nil)
	scrapeErr = prometheus.NewDesc(ns+"_scrape_errors", "Kernel counters that could not be read, and series that could not be built, during this scrape.", nil, nil)
)

// Collector reads a Source at scrape time. The workers' counters are
// atomics: a scrape takes no lock a worker ever takes.
type Collector struct {
	src     Source
	version [3]string
}

// NewCollector returns a Collector over src.
func NewCollector(src Source) *Collector {
	bi := buildinfo.Get()
	return &Collector{src: src, version: [3]string{bi.Version, bi.Revision, bi.GoVersion}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packets, bytes, drops, errs, gso, segments,
		batch, merged, toGuests, tapInfo, nicInfo, queueInfo, moves, buildInfo, ndDrops, vmPackets, vmBytes, vmDrops, vmGSO, vmEvents, vmState, xdpRing, scrapeErr} {
		ch <- d
	}
}

// Label values come from users: the TAP's and the NIC's names from the
// command line, the VM ports' from whoever has CAP_NET_ADMIN in the TAP's
// namespace, and a name the kernel accepts need not be UTF-8, which
// Prometheus requires of every label value. Such a name is kept, escaped,
// rather than its series skipped: skipping would let anyone who can rename
// a port hide its counters (drops included) behind one scrape-error count,
// while an escaped name still shows which port it is. The escape is
// strconv.Quote without the quotes (an invalid byte becomes \xff, a
// backslash \\), so two names stay two series, and it ends in " (not
// UTF-8)": the kernel refuses a space in a device name
// (net/core/dev.c: dev_valid_name), so no real name reads the same.
const notUTF8 = " (not UTF-8)"

// labelValue is the label value for name (a device name, or any other).
func labelValue(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	q := strconv.Quote(name)
	return q[1:len(q)-1] + notUTF8
}

// scrape sends one Collect's metrics. Every label value goes through
// labelValue, and a series that still cannot be built is counted in
// tapfwd_scrape_errors instead of panicking: a panic in Collect turns the
// whole page into an HTTP 500 (client_golang recovers it as an error).
type scrape struct {
	ch     chan<- prometheus.Metric
	failed uint64
}

func labelValues(labels []string) []string {
	for i, l := range labels {
		if v := labelValue(l); v != l {
			out := append([]string(nil), labels...)
			for j := i; j < len(out); j++ {
				out[j] = labelValue(out[j])
			}
			return out
		}
	}
	return labels
}

func (s *scrape) send(m prometheus.Metric, err error) {
	if err != nil {
		s.failed++
		return
	}
	s.ch <- m
}

func (s *scrape) gauge(d *prometheus.Desc, v float64, labels ...string) {
	s.send(prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labelValues(labels)...))
}

func (s *scrape) counter(d *prometheus.Desc, v uint64, labels ...string) {
	s.send(prometheus.NewConstMetric(d, prometheus.CounterValue, float64(v), labelValues(labels)...))
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := &c.src
	f := s.Features
	sc := &scrape{ch: ch}
	sc.gauge(tapInfo, 1, s.TAP,
		strconv.FormatBool(f.NAPI), strconv.FormatBool(f.VnetHdr), strconv.FormatBool(f.MultiQueue), f.OffloadNames())
	sc.gauge(nicInfo, 1, s.NIC, s.NICBackend, s.XDPMode)
	sc.gauge(buildInfo, 1, c.version[0], c.version[1], c.version[2])
	if s.Forwarder != nil {
		fromNIC, fromTAP := s.Forwarder.DropReasons()
		for _, q := range s.Forwarder.QueueWorkers() {
			c.collectQueue(sc, q, fromNIC, fromTAP)
		}
	}
	if s.LinkStats != nil {
		for _, dev := range []string{s.TAP, s.NIC} {
			st, err := s.LinkStats(dev)
			if err != nil {
				sc.failed++
				continue
			}
			sc.counter(ndDrops, st.RxDropped, dev, rx)
			sc.counter(ndDrops, st.TxDropped, dev, tx)
		}
	}
	if s.VMPorts != nil && s.LinkStats != nil {
		c.collectVMPorts(sc)
	}
	if s.Forwarder != nil && len(s.GuestPorts) > 0 {
		c.collectGuestPorts(sc)
	}
	if s.XDPRings != nil {
		c.collectXDPRings(sc)
	}
	sc.gauge(scrapeErr, float64(sc.failed))
}

// collectQueue sends one queue's counters, for both devices: drops only
// for the reasons that can happen.
func (c *Collector) collectQueue(sc *scrape, q *forward.QueueWorker, fromNIC, fromTAP []forward.DropReason) {
	s := &c.src
	qs := strconv.Itoa(q.ID)
	sc.gauge(queueInfo, 1, s.TAP, qs, strconv.Itoa(q.TAPCPU()))
	sc.gauge(queueInfo, 1, s.NIC, qs, strconv.Itoa(q.CPUNow()))
	sc.counter(moves, q.Moves(), qs)
	_, kdrops, err := q.KernelStats()
	if err != nil {
		sc.failed++
	}
	sc.counter(drops, kdrops, s.NIC, qs, KernelRing)
	for _, d := range []struct {
		from, to string
		dir      *forward.Dir
		reasons  []forward.DropReason
	}{{s.NIC, s.TAP, &q.Counters.NICToTAP, fromNIC}, {s.TAP, s.NIC, &q.Counters.TAPToNIC, fromTAP}} {
		sc.counter(packets, d.dir.Rx.Packets.Load(), d.from, qs, rx)
		sc.counter(bytes, d.dir.Rx.Bytes.Load(), d.from, qs, rx)
		sc.counter(packets, d.dir.Tx.Packets.Load(), d.to, qs, tx)
		sc.counter(bytes, d.dir.Tx.Bytes.Load(), d.to, qs, tx)
		sc.counter(gso, d.dir.GSO.Load(), d.from, qs)
		sc.counter(errs, d.dir.Errors.Load(), d.from, qs)
		if len(s.GuestPorts) > 0 {
			sc.counter(toGuests, d.dir.ToGuests.Load(), d.from, qs)
		}
		for _, r := range d.reasons {
			sc.counter(drops, d.dir.Drops[r].Load(), d.from, qs, r.String())
		}
		sc.send(histogram(&d.dir.Batch, d.from, qs))
	}
	sc.counter(segments, q.Counters.Segments.Load(), s.TAP, qs)
	if s.Forwarder.Merging() {
		sc.counter(merged, q.Counters.Merged.Load(), s.NIC, qs)
	}
}

// collectXDPRings sends the ring counters of each AF_XDP socket; a read
// that failed counts as a scrape error, and what it did read is sent.
func (c *Collector) collectXDPRings(sc *scrape) {
	rings, err := c.src.XDPRings()
	if err != nil {
		sc.failed++
	}
	for _, r := range rings {
		q := strconv.Itoa(r.Queue)
		for _, e := range []struct {
			name string
			v    uint64
		}{{"rx_dropped", r.RxDropped}, {"rx_invalid_descs", r.RxInvalidDescs}, {"tx_invalid_descs", r.TxInvalidDescs},
			{"rx_ring_full", r.RxRingFull}, {"rx_fill_ring_empty_descs", r.RxFillRingEmptyDescs}, {"tx_ring_empty_descs", r.TxRingEmptyDescs},
			{"refused_rx_descs", r.RefusedRxDescs}, {"refused_completions", r.RefusedCompletions}, {"refused_ring_index", r.RefusedRingIndex},
			{"fill_ring_full", r.FillRingFull}, {"oversize", r.Oversize}} {
			sc.counter(xdpRing, e.v, c.src.NIC, q, e.name)
		}
	}
}

// collectVMPorts sends the kernel's counters of each VM port on the TAP.
func (c *Collector) collectVMPorts(sc *scrape) {
	s := &c.src
	ports, err := s.VMPorts()
	if err != nil {
		sc.failed++
	}
	for _, p := range ports {
		st, err := s.LinkStats(p)
		if err != nil {
			sc.failed++
			continue
		}
		sc.counter(vmPackets, st.RxPackets, s.TAP, p, rx)
		sc.counter(vmBytes, st.RxBytes, s.TAP, p, rx)
		sc.counter(vmPackets, st.TxPackets, s.TAP, p, tx)
		sc.counter(vmBytes, st.TxBytes, s.TAP, p, tx)
		sc.counter(vmDrops, st.RxDropped, s.TAP, p, rx, NetdevReason)
		sc.counter(vmDrops, st.TxDropped, s.TAP, p, tx, NetdevReason)
	}
}

// guestStates are the values of tapfwd_vm_port_state's state label.
var guestStates = []vhostuser.State{vhostuser.StateListening, vhostuser.StateConnected, vhostuser.StateRunning, vhostuser.StateBroken}

// collectGuestPorts sends the vhost-user ports' counters: rx is what their
// workers handed the guest, tx what the guest sent; drops only for the
// reasons that can happen.
func (c *Collector) collectGuestPorts(sc *scrape) {
	s := &c.src
	fromGuest, toGuest := s.Forwarder.GuestDropReasons()
	for _, p := range s.GuestPorts {
		from, to := &p.Guest.Counters.From, &p.Guest.Counters.To
		sc.counter(vmPackets, to.Tx.Packets.Load(), s.TAP, p.Name, rx)
		sc.counter(vmBytes, to.Tx.Bytes.Load(), s.TAP, p.Name, rx)
		sc.counter(vmPackets, from.Rx.Packets.Load(), s.TAP, p.Name, tx)
		sc.counter(vmBytes, from.Rx.Bytes.Load(), s.TAP, p.Name, tx)
		for _, r := range toGuest {
			sc.counter(vmDrops, to.Drops[r].Load(), s.TAP, p.Name, rx, r.String())
		}
		for _, r := range fromGuest {
			sc.counter(vmDrops, from.Drops[r].Load(), s.TAP, p.Name, tx, r.String())
		}
		sc.counter(vmGSO, from.GSO.Load(), s.TAP, p.Name)
		if p.Stats != nil {
			st := p.Stats()
			for _, e := range [...]struct {
				name string
				n    uint64
			}{{"connect", st.Connects}, {"disconnect", st.Disconnects}, {"protocol_error", st.ProtocolErrors},
				{"turned_away", st.TurnedAway}, {"reset", st.Resets}} {
				sc.counter(vmEvents, e.n, s.TAP, p.Name, e.name)
			}
			sc.counter(vmDrops, st.TxDropped, s.TAP, p.Name, tx, PortReason)
		}
		now := p.State()
		for _, st := range guestStates {
			v := 0.0
			if st == now {
				v = 1
			}
			sc.gauge(vmState, v, s.TAP, p.Name, st.String())
		}
	}
}

func histogram(h *forward.Hist, labels ...string) (prometheus.Metric, error) {
	buckets := make(map[float64]uint64, forward.HistBuckets)
	var cum uint64
	for i := 0; i < forward.HistBuckets; i++ {
		cum += h.Buckets[i].Load()
		buckets[float64(forward.BucketBound(i))] = cum
	}
	// Count is read after the buckets: a batch published in between makes
	// Count larger than the last bucket, never smaller.
	count := max(h.Count.Load(), cum)
	return prometheus.NewConstHistogram(batch, count, float64(h.Sum.Load()), buckets, labelValues(labels)...)
}

// NewRegistry returns a registry with c, the Go and process collectors.
func NewRegistry(c prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(registered(c)...)
	return reg
}

// registered are the collectors NewRegistry registers.
func registered(c prometheus.Collector) []prometheus.Collector {
	return []prometheus.Collector{c,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
}

// Limits bound the scrapes Handler serves at once: each one runs the
// collectors, and with them the rtnetlink dumps of Source.LinkStats.
type Limits struct {
	// InFlight is how many scrapes may run at once; one more is answered
	// 503 at once. 0: no limit.
	InFlight int
	// Timeout answers 503 to a scrape that takes longer (the collection
	// still runs to its end, holding its InFlight slot). 0: none.
	Timeout time.Duration
}

// Handler serves reg at /metrics, within l, and a short index at /.
func Handler(reg *prometheus.Registry, l Limits) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg,
		MaxRequestsInFlight: l.InFlight, Timeout: l.Timeout}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(strings.TrimSpace(`<html><head><title>tapfwd</title></head><body><h1>tapfwd</h1><p><a href="/metrics">metrics</a></p></body></html>`)))
	})
	return mux
}
