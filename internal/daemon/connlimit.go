package daemon

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connCap bounds how many connections the metrics listener holds at once.
// Anyone who can reach the address can open connections, each an fd of
// tapfwd's: without a bound, a local user with a few thousand idle
// keep-alive connections exhausts tapfwd's fds, and vhost-user accepts
// then fail. A listener that merely stopped accepting at the bound would
// keep the fds but leave /metrics unanswered behind the idle ones, so at
// the bound a new connection evicts the one that waited longest without
// a request in progress: an idle keep-alive one first, then one that has
// not yet sent its request. Only when every connection is in the middle
// of a request is the new one closed at once.
type connCap struct {
	net.Listener
	limit int
	mu    sync.Mutex
	conns map[*cappedConn]struct{}
}

// cappedConn is a connection the cap counts, with the state the server
// last reported for it and since when.
type cappedConn struct {
	net.Conn
	cap   *connCap
	state http.ConnState
	since time.Time
	once  sync.Once
}

// capConns makes ln hold at most limit connections of srv at once; it sets
// srv.ConnState. Serve srv on the listener it returns.
func capConns(srv *http.Server, ln net.Listener, limit int) net.Listener {
	c := &connCap{Listener: ln, limit: limit, conns: map[*cappedConn]struct{}{}}
	srv.ConnState = c.track
	return c
}

// Accept accepts a connection, making room for it by eviction when the
// cap is reached.
func (c *connCap) Accept() (net.Conn, error) {
	for {
		nc, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if len(c.conns) >= c.limit {
			if v := c.victim(); v != nil {
				delete(c.conns, v)
				v.Conn.Close()
			}
		}
		if len(c.conns) >= c.limit {
			c.mu.Unlock()
			nc.Close() // every one is in the middle of a request
			continue
		}
		cc := &cappedConn{Conn: nc, cap: c, state: http.StateNew, since: time.Now()}
		c.conns[cc] = struct{}{}
		c.mu.Unlock()
		return cc, nil
	}
}

// victim is the connection to evict: the longest idle, else the oldest
// that has not sent its request; nil when all are in a request. c.mu is
// held.
func (c *connCap) victim() *cappedConn {
	var v *cappedConn
	for cc := range c.conns {
		switch {
		case cc.state != http.StateIdle && cc.state != http.StateNew:
		case v == nil,
			cc.state == http.StateIdle && v.state != http.StateIdle,
			cc.state == v.state && cc.since.Before(v.since):
			v = cc
		}
	}
	return v
}

// track is the server's ConnState hook: it records each connection's
// state, and forgets it once closed or hijacked.
func (c *connCap) track(nc net.Conn, s http.ConnState) {
	cc, ok := nc.(*cappedConn)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(c.conns, cc)
		return
	}
	cc.state, cc.since = s, time.Now()
}

// Close closes the connection and makes its room available.
func (cc *cappedConn) Close() error {
	cc.once.Do(func() {
		cc.cap.mu.Lock()
		delete(cc.cap.conns, cc)
		cc.cap.mu.Unlock()
	})
	return cc.Conn.Close()
}
