package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/buildinfo"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// StatusSchema names the layout of Status.
const StatusSchema = "tapfwd-status/1"

// Status is what a running forwarder negotiated and is doing: the JSON of
// /status on the metrics listener.
type Status struct {
	// Schema names this layout (StatusSchema).
	Schema string `json:"schema"`
	// Build is the binary that answers: its release, revision and Go
	// version.
	Build buildinfo.Info `json:"build"`
	// Started is when the forwarder started, UptimeSeconds how long ago.
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// TAP is the TAP and what the kernel granted, NIC the NIC's name.
	TAP TAPStatus `json:"tap"`
	NIC string    `json:"nic"`
	// NICBackend is the sockets' kind on the NIC (packet, xdp), XDPMode
	// how the XDP program is attached (native, generic), Poll how the
	// workers wait.
	NICBackend string `json:"nic_backend"`
	XDPMode    string `json:"xdp_mode,omitempty"`
	Poll       string `json:"poll"`
	// Queues are the TAP's queues, a worker each.
	Queues []QueueStatus `json:"queues"`
	// VMPorts are every VM port on the TAP, however it was made.
	VMPorts []PortStatus `json:"vm_ports"`
	// VMPortsError says why the TAP's macvtap ports could not be listed:
	// VMPorts then has those this run made or adopted only.
	VMPortsError string `json:"vm_ports_error,omitempty"`
	// RateSeconds is the window the rates are taken over (the last
	// completed one); 0 before the first window ends.
	RateSeconds float64 `json:"rate_seconds"`
	// AB is the bench's A/B mode (Config.AB); absent without it.
	AB *ABStatus `json:"ab,omitempty"`
	// AnsweredBy is who served it, where FetchStatus could tell; not a
	// part of the JSON.
	AnsweredBy *Answerer `json:"-"`
}

// TAPStatus is the TAP and what the kernel granted.
type TAPStatus struct {
	// Name is the TAP's name, Netns the network namespace it is in (a
	// name under /run/netns; absent: tapfwd's own), MAC and MTU its
	// Ethernet address and MTU.
	Name  string `json:"name"`
	Netns string `json:"netns,omitempty"`
	MAC   string `json:"mac"`
	MTU   int    `json:"mtu"`
	// NAPI, VnetHdr and MultiQueue are the TUN features the kernel
	// granted (IFF_NAPI, IFF_VNET_HDR, IFF_MULTI_QUEUE), Offloads the
	// offloads the TAP takes (csum, tso4, ..., comma-separated).
	NAPI       bool   `json:"napi"`
	VnetHdr    bool   `json:"vnet_hdr"`
	MultiQueue bool   `json:"multi_queue"`
	Offloads   string `json:"offloads"`
	// Persistent: the TAP stays when tapfwd exits.
	Persistent bool `json:"persistent"`
	// Attached: this run attached to a persistent TAP an earlier one left.
	Attached bool `json:"attached"`
}

// QueueStatus is one worker: where it runs and what it moved, each way.
type QueueStatus struct {
	// ID is the queue's number, from 0.
	ID int `json:"id"`
	// CPU the worker is pinned to now; -1: not pinned.
	CPU int `json:"cpu"`
	// TAPCPU is the CPU the worker that reads the TAP is pinned to now:
	// CPU, unless the queue is split into a worker per direction
	// (Workers.Split).
	TAPCPU int `json:"tap_cpu"`
	// Moves counts the worker's moves to another CPU to follow its load
	// (Workers.FollowLoad).
	Moves uint64 `json:"moves"`
	// KernelDrops are frames the kernel dropped before tapfwd saw them
	// (the packet socket's queue overflowed): metrics reason kernel_ring.
	KernelDrops uint64 `json:"kernel_drops"`
	// NICToTAP counts the frames from the NIC to the TAP, TAPToNIC those
	// the other way.
	NICToTAP DirStatus `json:"nic_to_tap"`
	TAPToNIC DirStatus `json:"tap_to_nic"`
}

// DirStatus counts one direction, as the metrics do: frames received from
// one device, transmitted to the other, dropped by reason.
type DirStatus struct {
	// RxPackets and RxBytes are the frames received from one device and
	// their bytes, TxPackets and TxBytes those transmitted to the other,
	// GSOFrames the GSO super-frames received, Errors the unexpected
	// errors that did not stop the worker, Drops the frames received and
	// not delivered, by reason (only the reasons that can happen under
	// this configuration).
	RxPackets uint64            `json:"rx_packets"`
	RxBytes   uint64            `json:"rx_bytes"`
	TxPackets uint64            `json:"tx_packets"`
	TxBytes   uint64            `json:"tx_bytes"`
	GSOFrames uint64            `json:"gso_frames"`
	Errors    uint64            `json:"errors"`
	Drops     map[string]uint64 `json:"drops"`
	// Received frames and bytes per second over the rate window.
	RxPacketsPerSecond float64 `json:"rx_packets_per_second"`
	RxBytesPerSecond   float64 `json:"rx_bytes_per_second"`
}

// PortStatus is a VM port on the TAP: a macvtap (Dev its device node) or
// a vhost-user port (the fields after Origin).
type PortStatus struct {
	// Name is the port's name (a macvtap's netdev), MAC its guest's
	// Ethernet address, Dev a macvtap's device node (empty without one).
	Name string `json:"name"`
	MAC  string `json:"mac"`
	Dev  string `json:"dev"`
	Type string `json:"type"` // "macvtap" or "vhost-user"
	// Origin is how the port came: "run" when this run made it, or
	// adopted it from a persistent TAP, at its start (Config.VMPorts);
	// "added" for a macvtap found on the TAP that was added since (tapfwd
	// vm-port add, libvirt's type='direct').
	Origin string `json:"origin"`
	// Socket is a vhost-user port's socket; State where it stands
	// (listening: no QEMU, connected, running: frames move, broken: the
	// guest broke the virtqueue rules); Features the virtio features its
	// front-end negotiated.
	Socket   string   `json:"socket,omitempty"`
	State    string   `json:"state,omitempty"`
	Features []string `json:"features,omitempty"`
	// QueuePairs are the queue pairs a vhost-user port offers, ActivePairs
	// those its guest runs now.
	QueuePairs  int `json:"queue_pairs,omitempty"`
	ActivePairs int `json:"active_pairs,omitempty"`
	// QEMU is a command line for a VM on this port, Libvirt the domain's
	// <interface>, which needs LibvirtMemory (shared memory) too.
	QEMU          string `json:"qemu,omitempty"`
	Libvirt       string `json:"libvirt,omitempty"`
	LibvirtMemory string `json:"libvirt_memory,omitempty"`
	// FromGuest counts what the guest sent (transmitted: delivered to its
	// first destination), ToGuest what was for it (received into its
	// queue's inbox, transmitted into the guest).
	FromGuest *DirStatus `json:"from_guest,omitempty"`
	ToGuest   *DirStatus `json:"to_guest,omitempty"`
}

// statusSource builds Status from the running daemon and keeps the rate
// windows: a sample of the counters every window, so a status request
// costs nothing but reading atomics.
type statusSource struct {
	d       *Daemon
	started time.Time
	window  time.Duration

	// ports lists the macvtaps on the TAP (a tapport.Lister); nil lists
	// only those this run made or adopted.
	ports func() ([]tapport.Port, error)

	mu         sync.Mutex
	prev, last []dirSample // per queue, two directions
	prevAt     time.Time
	lastAt     time.Time
}

type dirSample struct{ rxPackets, rxBytes uint64 }

func newStatusSource(d *Daemon, window time.Duration) *statusSource {
	s := &statusSource{d: d, started: time.Now(), window: window}
	s.last, s.lastAt = s.sample(), s.started
	return s
}

func (s *statusSource) sample() []dirSample {
	var out []dirSample
	for _, q := range s.d.fw.QueueWorkers() {
		for _, dir := range []*forward.Dir{&q.Counters.NICToTAP, &q.Counters.TAPToNIC} {
			out = append(out, dirSample{dir.Rx.Packets.Load(), dir.Rx.Bytes.Load()})
		}
	}
	return out
}

// run samples every window until ctx ends.
func (s *statusSource) run(ctx context.Context) {
	t := time.NewTicker(s.window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.tick(now)
		}
	}
}

// tick takes a sample.
func (s *statusSource) tick(now time.Time) {
	cur := s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prev, s.prevAt, s.last, s.lastAt = s.last, s.lastAt, cur, now
}

// Status reads the counters now and the rates of the last window.
func (s *statusSource) Status() Status {
	d := s.d
	f := d.dev.Features()
	st := Status{Schema: StatusSchema, Build: buildinfo.Get(), Started: s.started, UptimeSeconds: time.Since(s.started).Seconds(),
		TAP: TAPStatus{Name: d.dev.Name(), Netns: d.dev.Netns(), MAC: d.dev.MAC().String(), MTU: d.c.TAP.MTU, NAPI: f.NAPI,
			VnetHdr: f.VnetHdr, MultiQueue: f.MultiQueue, Offloads: f.OffloadNames(), Persistent: d.dev.Persistent(), Attached: d.dev.Attached()},
		NIC: d.c.NIC.Name, NICBackend: d.c.NIC.Backend.String(), XDPMode: d.nic.xdpMode(), Poll: d.c.Workers.Poll.String(),
		AB: d.abStatus()}
	st.VMPorts, st.VMPortsError = d.macvtapStatus(s.ports)
	st.VMPorts = append(st.VMPorts, d.vhostStatus()...)
	s.mu.Lock()
	prev, last, secs := s.prev, s.last, s.lastAt.Sub(s.prevAt).Seconds()
	s.mu.Unlock()
	if prev != nil && secs > 0 {
		st.RateSeconds = secs
	}
	fromNIC, fromTAP := d.fw.DropReasons()
	for i, q := range d.fw.QueueWorkers() {
		qs := QueueStatus{ID: q.ID, CPU: q.CPUNow(), TAPCPU: q.TAPCPU(), Moves: q.Moves()}
		_, qs.KernelDrops, _ = q.KernelStats()
		qs.NICToTAP = dirStatus(&q.Counters.NICToTAP, fromNIC)
		qs.TAPToNIC = dirStatus(&q.Counters.TAPToNIC, fromTAP)
		if st.RateSeconds > 0 {
			for k, ds := range []*DirStatus{&qs.NICToTAP, &qs.TAPToNIC} {
				a, b := prev[2*i+k], last[2*i+k]
				ds.RxPacketsPerSecond = float64(b.rxPackets-a.rxPackets) / secs
				ds.RxBytesPerSecond = float64(b.rxBytes-a.rxBytes) / secs
			}
		}
		st.Queues = append(st.Queues, qs)
	}
	return st
}

func dirStatus(dir *forward.Dir, reasons []forward.DropReason) DirStatus {
	ds := DirStatus{RxPackets: dir.Rx.Packets.Load(), RxBytes: dir.Rx.Bytes.Load(), TxPackets: dir.Tx.Packets.Load(),
		TxBytes: dir.Tx.Bytes.Load(), GSOFrames: dir.GSO.Load(), Errors: dir.Errors.Load(), Drops: map[string]uint64{}}
	for _, r := range reasons {
		ds.Drops[r.String()] = dir.Drops[r].Load()
	}
	return ds
}

// Origin values of PortStatus.
const (
	OriginRun   = "run"
	OriginAdded = "added"
)

// macvtapStatus describes the macvtap ports on the TAP, as list finds
// them (every port, OriginAdded those this run did not make or adopt),
// else, when list is nil or fails (the error's text), those this run
// made or adopted.
func (d *Daemon) macvtapStatus(list func() ([]tapport.Port, error)) ([]PortStatus, string) {
	ours := map[string]int{}
	for _, p := range d.ports.macvtaps {
		ours[p.Name] = p.Index
	}
	found, errText := d.ports.macvtaps, ""
	if list != nil {
		ports, err := list()
		if err != nil {
			errText = err.Error()
		} else {
			found = ports
		}
	}
	out := []PortStatus{}
	for _, p := range found {
		origin := OriginAdded
		if i, ok := ours[p.Name]; ok && i == p.Index {
			origin = OriginRun
		}
		out = append(out, PortStatus{Name: p.Name, MAC: p.MAC.String(), Dev: p.Dev, Type: "macvtap", Origin: origin})
	}
	return out, errText
}

// vhostStatus describes the vhost-user ports.
func (d *Daemon) vhostStatus() []PortStatus {
	var out []PortStatus
	fromGuest, toGuest := d.fw.GuestDropReasons()
	for i, g := range d.fw.GuestWorkers() {
		p := d.ports.vhost[i]
		from, to := dirStatus(&g.Counters.From, fromGuest), dirStatus(&g.Counters.To, toGuest)
		out = append(out, PortStatus{Name: p.Name, MAC: p.MAC.String(), Type: "vhost-user", Origin: OriginRun, Socket: p.Path,
			State: p.port.State().String(), Features: vhostuser.FeatureNames(p.port.Features()),
			QueuePairs: len(p.port.Queues()), ActivePairs: p.port.ActivePairs(),
			QEMU: vhostuser.QEMULine(p.Path, p.MAC, i, len(p.port.Queues())), Libvirt: vhostuser.LibvirtXML(p.Path, p.MAC, len(p.port.Queues())), LibvirtMemory: vhostuser.LibvirtMemory,
			FromGuest: &from, ToGuest: &to})
	}
	return out
}

// ServeHTTP serves the status as JSON at /status.
func (s *statusSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	e.Encode(s.Status())
}

// statusWindow is how often /status samples the counters for its rates.
const statusWindow = 5 * time.Second

// ErrNoStatus means that nothing answered where FetchStatus asked.
var ErrNoStatus = errors.New("no tapfwd answers")

// FetchStatus asks the daemon whose metrics listener is at addr (HOST:PORT)
// for its Status; raw is the JSON as it was served. st.AnsweredBy says
// which process answered, looked up while the connection is open.
func FetchStatus(addr string) (st Status, raw []byte, err error) {
	const timeout = 5 * time.Second
	c := http.Client{Timeout: timeout}
	var local, remote net.Addr
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		local, remote = i.Conn.LocalAddr(), i.Conn.RemoteAddr()
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "http://"+addr+"/status", nil)
	if err != nil {
		return st, nil, fmt.Errorf("%w at %s: %w", ErrNoStatus, addr, err)
	}
	resp, err := c.Do(req)
	var ue *url.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &ue) && ue.Timeout():
		return st, nil, fmt.Errorf("%w at %s within %v", ErrNoStatus, addr, timeout)
	case errors.As(err, &oe):
		return st, nil, fmt.Errorf("%w at %s: %w", ErrNoStatus, addr, oe.Err) // "connect: connection refused"
	case err != nil:
		return st, nil, fmt.Errorf("%w at %s: %w", ErrNoStatus, addr, err)
	}
	defer resp.Body.Close()
	by := answerer(local, remote)
	raw, err = io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case err != nil:
		return st, nil, fmt.Errorf("reading %s/status: %w", addr, err)
	case resp.StatusCode != http.StatusOK:
		// Not resp.Status: its text is the server's, unfiltered.
		return st, nil, fmt.Errorf("%s/status answers %d %s: not a tapfwd, or one older than /status; answered %v",
			addr, resp.StatusCode, http.StatusText(resp.StatusCode), by)
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.Schema != StatusSchema {
		return st, nil, fmt.Errorf("%s/status is not a tapfwd status of schema %s (it has %q); answered %v", addr, StatusSchema, st.Schema, by)
	}
	st.AnsweredBy = by
	return st, raw, nil
}
