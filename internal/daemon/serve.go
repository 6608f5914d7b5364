package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/metrics"
	"github.com/tapfwd/tapfwd/netns"
)

// httpLimits bound what a client of the metrics listener can hold: the
// listener is reachable by whoever can reach Metrics.Addr, and every
// scrape costs rtnetlink dumps. Tests use short ones.
type httpLimits struct {
	ReadHeader time.Duration // from a request's first byte to the end of its header
	Read       time.Duration // the whole request
	Write      time.Duration // from the end of the header to the end of the response
	Idle       time.Duration // a keep-alive connection between requests
	Conns      int           // connections held at once; one more evicts an idle one (capConns)
	Scrapes    int           // /metrics requests at once; one more gets 503 at once
	Scrape     time.Duration // a /metrics collection; a longer one gets 503
	Profile    time.Duration // the longest profile or trace (?seconds=) PProf serves
}

// serveLimits are the daemon's. A scrape here takes milliseconds (one
// rtnetlink dump per device and VM port); 10 s is Prometheus's default
// scrape_timeout. Prometheus scrapes a target one request at a time: 4
// at once leaves room for an HA pair and a person with curl, and more
// would only repeat the same dumps. Write exceeds Scrape so that the 503
// of a scrape that timed out still reaches the client. A request header
// is a few hundred bytes: 2 s is ample even across a slow network, and a
// connection that sends none is gone soon. Idle is short, so that idle
// connections do not pile up: below the common 15 s scrape interval,
// Prometheus opens one per scrape (a handshake that costs next to nothing
// beside the scrape) rather than racing the server's close. Conns bounds
// tapfwd's fds and memory whatever a local user opens (capConns): the
// clients above need a handful; the rest is room. A CPU profile lasts
// 30 s unless asked otherwise; 60 s is the most PProf serves, and with
// PProf the write timeout grows by as much (see newMetricsServer).
var serveLimits = httpLimits{
	ReadHeader: 2 * time.Second,
	Read:       10 * time.Second,
	Write:      30 * time.Second,
	Idle:       10 * time.Second,
	Conns:      64,
	Scrapes:    4,
	Scrape:     10 * time.Second,
	Profile:    60 * time.Second,
}

// newMetricsServer is the metrics listener's HTTP server: /metrics, the
// index, status (when not nil) at /status, with pprof the profiler under
// /debug/pprof/, all within l. It needs no privilege and opens nothing.
func newMetricsServer(src metrics.Source, status http.Handler, withPprof bool, l httpLimits) *http.Server {
	var handler http.Handler = metrics.Handler(metrics.NewRegistry(metrics.NewCollector(src)),
		metrics.Limits{InFlight: l.Scrapes, Timeout: l.Scrape})
	if status != nil {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/status", status)
		handler = mux
	}
	write := l.Write
	if withPprof {
		pp := http.NewServeMux()
		pp.HandleFunc("/debug/pprof/", pprof.Index)
		pp.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pp.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pp.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.Handle("/debug/pprof/", boundSeconds(l.Profile, pp))
		handler = mux
		// A profile's response is written when it ends: the write timeout
		// must outlast the longest one allowed.
		write += l.Profile
	}
	return &http.Server{Handler: handler, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read,
		WriteTimeout: write, IdleTimeout: l.Idle}
}

// boundSeconds refuses, with 400 and one line, a request whose seconds
// (the length of a profile, a trace or a delta profile) is not a number
// of at most limit. Clamping it instead would hand back a shorter profile
// than was asked for without saying so.
func boundSeconds(limit time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.FormValue("seconds"); s != "" {
			// !(sec <= limit) also refuses NaN.
			if sec, err := strconv.ParseFloat(s, 64); err != nil || !(sec <= limit.Seconds()) {
				http.Error(w, fmt.Sprintf("seconds: at most %v s (tapfwd's bound on profiles and traces)", limit.Seconds()), http.StatusBadRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// metricsServer is the server listenMetrics made and serveMetrics starts.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
}

// listenMetrics builds the server behind the address bindMetrics bound
// (before privileges are dropped: a low port may need them). The rtnetlink
// sockets that read the TAP's and the NIC's kernel counters are opened
// now, so scrapes need no privilege later. Nothing is served until
// serveMetrics: connections wait in the listen backlog.
func (d *Daemon) listenMetrics() error {
	m := d.c.Metrics
	if m == nil {
		return nil
	}
	src, err := d.metricsSource()
	if err != nil {
		return err
	}
	srv := newMetricsServer(src, d.status, m.PProf, serveLimits)
	d.http.srv = srv
	d.http.ln = capConns(srv, d.http.ln, serveLimits.Conns)
	// Not served yet, the listener is closed by bindMetrics' undo.
	d.undo.add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close() // a profile still running
		}
	})
	return nil
}

// serveMetrics starts serving what listenMetrics bound. It runs after
// privileges are dropped, so no request is ever handled with them.
func (d *Daemon) serveMetrics() error {
	m := d.http
	if m == nil {
		return nil // metrics off
	}
	go m.srv.Serve(m.ln)
	d.log.Info("metrics", "url", "http://"+m.ln.Addr().String()+"/metrics")
	return nil
}

// metricsSource is what the collector reads: the workers' counters and
// the kernel's, over rtnetlink sockets in the TAP's and the NIC's
// namespaces.
func (d *Daemon) metricsSource() (metrics.Source, error) {
	tapNS, err := netns.Open(d.dev.Netns())
	if err != nil {
		return metrics.Source{}, err
	}
	d.undo.add(func() { tapNS.Close() })
	nicNS, err := netns.Open("")
	if err != nil {
		return metrics.Source{}, err
	}
	d.undo.add(func() { nicNS.Close() })
	nic, tapName := d.c.NIC.Name, d.dev.Name()
	d.listVMPorts(tapNS, tapName)
	var guests []metrics.GuestPort
	for i, g := range d.fw.GuestWorkers() {
		p := d.ports.vhost[i]
		guests = append(guests, metrics.GuestPort{Name: p.Name, State: p.port.State, Guest: g, Stats: p.port.Stats})
	}
	var rings func() ([]metrics.XDPRing, error)
	if d.c.NIC.Backend == BackendXDP {
		rings = d.rings.read
	}
	return metrics.Source{TAP: tapName, XDPRings: rings, NIC: nic, NICBackend: d.c.NIC.Backend.String(), XDPMode: d.nic.xdpMode(), Features: d.dev.Features(), Forwarder: d.fw, GuestPorts: guests,
		LinkStats: func(name string) (netns.LinkStats, error) {
			if name == nic {
				return nicNS.Stats(name)
			}
			return tapNS.Stats(name) // the TAP and its VM ports
		},
		VMPorts: func() ([]string, error) { return tapNS.Macvtaps(tapName) }}, nil
}

// listVMPorts lets /status list the macvtaps on the TAP, those added
// after the start included, over the TAP's namespace handle (tapNS, which
// metrics keep) and a sysfs view opened now, before the privilege drop.
// Without that view /status lists the ports this run made.
func (d *Daemon) listVMPorts(tapNS *netns.NS, tapName string) {
	l, err := tapport.NewLister(tapNS, tapName)
	if err != nil {
		d.log.Warn("/status lists only the VM ports this run made", "err", err)
		return
	}
	d.undo.add(func() { l.Close() })
	d.status.ports = l.List
}
