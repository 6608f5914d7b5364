package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/metrics"
	"github.com/tapfwd/tapfwd/netns"
)

// testLimits are short versions of serveLimits, so that the tests see
// each limit act in well under a second.
var testLimits = httpLimits{
	ReadHeader: 300 * time.Millisecond,
	Read:       time.Second,
	Write:      500 * time.Millisecond,
	Idle:       300 * time.Millisecond,
	Conns:      8,
	Scrapes:    2,
	Scrape:     10 * time.Second,
	Profile:    2 * time.Second,
}

// serveOn serves newMetricsServer(src, pprof, l) on a loopback port until
// t ends and returns its address. No root is needed.
func serveOn(t *testing.T, src metrics.Source, pprof bool, l httpLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newMetricsServer(src, nil, pprof, l)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(capConns(srv, ln, l.Conns))
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// get fetches url with a client that gives up after wait.
func get(url string, wait time.Duration) (int, string, error) {
	c := &http.Client{Timeout: wait}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// blockingSource is a Source whose LinkStats waits until release is
// closed (a slow rtnetlink dump); entered receives once per call.
func blockingSource(t *testing.T) (src metrics.Source, entered chan struct{}, release func()) {
	entered = make(chan struct{}, 64)
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	src = metrics.Source{TAP: "tap0", NIC: "eth1",
		LinkStats: func(string) (netns.LinkStats, error) {
			entered <- struct{}{}
			<-ch
			return netns.LinkStats{}, nil
		}}
	return src, entered, release
}

// TestScrapeLimit holds Scrapes slow scrapes in flight: one more is
// answered 503 at once, and the slow ones all end 200.
func TestScrapeLimit(t *testing.T) {
	src, entered, release := blockingSource(t)
	addr := serveOn(t, src, false, testLimits)
	url := "http://" + addr + "/metrics"
	n := testLimits.Scrapes
	codes := make(chan int, n)
	for range n {
		go func() {
			code, _, err := get(url, 20*time.Second)
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	for range n {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("fewer than %d scrapes reached the collector", n)
		}
	}
	code, body, err := get(url, 3*time.Second)
	if err != nil {
		t.Errorf("scrape %d of %d in flight: %v (want 503 at once)", n+1, n, err)
	} else if code != http.StatusServiceUnavailable {
		t.Errorf("scrape %d of %d in flight: %d, want 503\n%.200s", n+1, n, code, body)
	}
	release()
	for range n {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a scrape within the limit got %d, want 200", code)
		}
	}
	if code, _, err := get(url, 10*time.Second); err != nil || code != http.StatusOK {
		t.Errorf("a scrape after the slow ones: %d, %v; want 200", code, err)
	}
}

// TestScrapeTimeout: a scrape whose collection outlasts Scrape is
// answered 503 when the time is up.
func TestScrapeTimeout(t *testing.T) {
	src, _, _ := blockingSource(t)
	l := testLimits
	l.Scrape = 200 * time.Millisecond
	addr := serveOn(t, src, false, l)
	code, body, err := get("http://"+addr+"/metrics", 5*time.Second)
	if err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("a scrape that cannot finish: %d, %v, want 503\n%.200s", code, err, body)
	}
}

// TestPprofBound: a profile or trace longer than Profile is refused with
// 400 and one line saying why; one within it is served, although it takes
// longer than the Write timeout.
func TestPprofBound(t *testing.T) {
	addr := serveOn(t, metrics.Source{TAP: "tap0", NIC: "eth1"}, true, testLimits)
	base := "http://" + addr + "/debug/pprof/"
	for _, q := range []string{"profile?seconds=3600", "trace?seconds=3600", "heap?seconds=3600",
		"profile?seconds=Inf", "trace?seconds=NaN", "profile?seconds=2.5"} {
		code, body, err := get(base+q, 5*time.Second)
		if err != nil {
			t.Errorf("%s: %v (want 400 at once)", q, err)
			continue
		}
		if code != http.StatusBadRequest || strings.Count(strings.TrimSpace(body), "\n") != 0 || !strings.Contains(body, "at most 2 s") {
			t.Errorf("%s: %d %.80q, want 400 and one line saying the bound", q, code, body)
		}
	}
	for _, q := range []string{"profile?seconds=1", "trace?seconds=1", "heap", "profile?seconds=2"} {
		start := time.Now()
		code, body, err := get(base+q, 10*time.Second)
		if err != nil || code != http.StatusOK || len(body) == 0 {
			t.Errorf("%s: %d, %d bytes, %v; want 200 and a profile", q, code, len(body), err)
		}
		t.Logf("%s: %d bytes in %v", q, len(body), time.Since(start).Round(time.Millisecond))
	}
}

// send connects to addr and writes req; the connection is closed when t
// ends.
func send(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServerTimeouts: a client that sends part of a request header and
// stalls is disconnected after ReadHeader, and a keep-alive connection
// left idle after a request is closed after Idle.
func TestServerTimeouts(t *testing.T) {
	addr := serveOn(t, metrics.Source{TAP: "tap0", NIC: "eth1"}, false, testLimits)
	t.Run("partial header", func(t *testing.T) {
		c := send(t, addr, "GET /metrics HTTP/1.1\r\nHost: tapfwd\r\n")
		start := time.Now()
		waitClosed(t, c, start, testLimits.ReadHeader)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := send(t, addr, "GET / HTTP/1.1\r\nHost: tapfwd\r\n\r\n")
		br := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /: %s, close %v; want 200 on a connection kept alive", resp.Status, resp.Close)
		}
		waitClosed(t, bufferedConn{br, c}, time.Now(), testLimits.Idle)
	})
}

// bufferedConn reads what its bufio.Reader holds, then the connection.
type bufferedConn struct {
	r *bufio.Reader
	net.Conn
}

func (b bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// waitClosed reads from c until the server closes it, and fails unless
// that happens after about timeout (not before half of it: the server's
// clock starts a little after start) and within a few seconds more.
func waitClosed(t *testing.T, c interface {
	io.Reader
	SetReadDeadline(time.Time) error
}, start time.Time, timeout time.Duration) {
	t.Helper()
	c.SetReadDeadline(start.Add(timeout + 3*time.Second))
	n, err := io.Copy(io.Discard, c)
	took := time.Since(start)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the connection is still open %v later (want it closed after %v)", took.Round(time.Millisecond), timeout)
	case took < timeout/2:
		t.Fatalf("closed after %v, before the %v timeout (read %d bytes, %v)", took, timeout, n, err)
	}
	t.Logf("closed after %v (timeout %v), %d bytes, %v", took.Round(time.Millisecond), timeout, n, err)
}

// TestConnCap (issue 35): past Conns connections the server holds no
// more. Idle keep-alive connections, each after one request, are evicted
// and /metrics still answers; so it does behind connections that never
// send a request. The timeouts are long here, so that only the cap can
// close a connection. (Which idle ones go is not asserted beyond the
// newest staying: the server reports a connection idle a moment after
// the client has its response, and on a busy machine the next few
// connections can come first.)
func TestConnCap(t *testing.T) {
	l := testLimits
	l.ReadHeader, l.Idle, l.Conns = 20*time.Second, 20*time.Second, 16
	addr := serveOn(t, metrics.Source{TAP: "tap0", NIC: "eth1"}, false, l)
	t.Run("idle", func(t *testing.T) {
		var conns []net.Conn
		for range 4 * l.Conns {
			c := send(t, addr, "GET / HTTP/1.1\r\nHost: tapfwd\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("GET / on connection %d: %v", len(conns), err)
			}
			resp.Body.Close()
			conns = append(conns, c)
		}
		scrapeWithin(t, addr, 2*time.Second)
		// The scrape's connection took the place of an idle one.
		var open []int
		for i, c := range conns {
			if isOpen(c) {
				open = append(open, i)
			}
		}
		if len(open) > l.Conns-1 || len(open) == 0 || open[len(open)-1] != len(conns)-1 {
			t.Errorf("after %d idle connections and a scrape the server holds connections %v of them, want at most %d with the newest", len(conns), open, l.Conns-1)
		}
	})
	t.Run("silent", func(t *testing.T) {
		for range 2 * l.Conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		scrapeWithin(t, addr, 2*time.Second)
	})
}

// scrapeWithin fails t unless GET /metrics answers 200 within limit.
func scrapeWithin(t *testing.T, addr string, limit time.Duration) {
	t.Helper()
	start := time.Now()
	code, body, err := get("http://"+addr+"/metrics", limit)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "tapfwd_") {
		t.Fatalf("GET /metrics: %d, %v after %v\n%.200s", code, err, time.Since(start), body)
	}
}

// isOpen says whether the server still holds c open: a read waits rather
// than ending.
func isOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
