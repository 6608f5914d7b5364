package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/tapfwd/tapfwd/metrics"
	"github.com/tapfwd/tapfwd/netns"
)

// serveMetrics serves /metrics (and the profiler with --pprof) on
// --metrics-addr. The rtnetlink sockets that read the TAP's and the NIC's
// kernel counters are opened now, so scrapes need no privilege later.
func (d *daemon) serveMetrics() error {
	if d.c.MetricsAddr == "" {
		return nil
	}
	src, err := d.metricsSource()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", d.c.MetricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w (choose another address, or \"\" to disable metrics)", err)
	}
	handler := metrics.Handler(metrics.NewRegistry(metrics.NewCollector(src)))
	if d.c.PProf {
		mux := http.NewServeMux()
		mux.Handle("/", handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		handler = mux
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	d.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		srv.Shutdown(ctx)
	})
	d.log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// metricsSource is what the collector reads: the workers' counters and
// the kernel's, over rtnetlink sockets in the TAP's and the NIC's
// namespaces.
func (d *daemon) metricsSource() (metrics.Source, error) {
	tapNS, err := netns.Open(d.dev.Netns())
	if err != nil {
		return metrics.Source{}, err
	}
	d.onClose(func() { tapNS.Close() })
	nicNS, err := netns.Open("")
	if err != nil {
		return metrics.Source{}, err
	}
	d.onClose(func() { nicNS.Close() })
	nic, tapName := d.c.NIC, d.dev.Name()
	return metrics.Source{TAP: tapName, NIC: nic, Features: d.dev.Features(), Queues: d.fw.Queues(),
		LinkStats: func(name string) (netns.LinkStats, error) {
			if name == nic {
				return nicNS.Stats(name)
			}
			return tapNS.Stats(name) // the TAP and its VM ports
		},
		VMPorts: func() ([]string, error) { return tapNS.Macvtaps(tapName) }}, nil
}
