package traffic

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// DataServer runs in the wire namespace (or, StartDataServerAt, another
// namespace of the bed): guests send it data on TxPort (it keeps the
// SHA-256 and size per guest address) and fetch data from RxPort (it sends
// size random bytes and keeps their SHA-256); Check compares both with
// what the guest said of them.
type DataServer struct {
	TxPort, RxPort int
	size           int64

	mu   sync.Mutex
	got  map[netip.Addr]transfer
	sent map[netip.Addr]transfer
	lns  []net.Listener
	wg   sync.WaitGroup
}

// transfer is one connection's data: its size and SHA-256 (hex), and the
// error that ended it early.
type transfer struct {
	Bytes int64
	Sum   string
	Err   error
}

// StartDataServer listens on bed's wire address for transfers of size
// bytes; it stops when t ends.
func StartDataServer(t testing.TB, bed *testbed.Bed, size int64) *DataServer {
	t.Helper()
	return StartDataServerAt(t, bed, bed.WireNS, bed.WireAddr.Addr(), size)
}

// StartDataServerAt listens on addr in namespace ns of bed (the lab host's
// address in the lab, say) for transfers of size bytes; it stops when t
// ends.
func StartDataServerAt(t testing.TB, bed *testbed.Bed, ns string, addr netip.Addr, size int64) *DataServer {
	t.Helper()
	s := &DataServer{size: size, got: map[netip.Addr]transfer{}, sent: map[netip.Addr]transfer{}}
	err := bed.Do(ns, func() error {
		for i := 0; i < 2; i++ {
			ln, err := net.Listen("tcp4", net.JoinHostPort(addr.String(), "0"))
			if err != nil {
				return err
			}
			s.lns = append(s.lns, ln)
		}
		return nil
	})
	if err != nil {
		for _, ln := range s.lns {
			ln.Close()
		}
		t.Fatalf("listening on %s in %s: %v", addr, ns, err)
	}
	s.TxPort = s.lns[0].Addr().(*net.TCPAddr).Port
	s.RxPort = s.lns[1].Addr().(*net.TCPAddr).Port
	s.serve(s.lns[0], s.receive)
	s.serve(s.lns[1], s.send)
	t.Cleanup(s.close)
	return s
}

func (s *DataServer) serve(ln net.Listener, handle func(net.Conn) transfer) {
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute))
				r := handle(c)
				from := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				s.mu.Lock()
				if ln == s.lns[0] {
					s.got[from] = r
				} else {
					s.sent[from] = r
				}
				s.mu.Unlock()
			})
		}
	})
}

// receive reads until the guest shuts its side (busybox nc does at the end
// of its input) or more than size bytes arrived.
func (s *DataServer) receive(c net.Conn) transfer {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(c, s.size+1))
	return transfer{Bytes: n, Sum: hex.EncodeToString(h.Sum(nil)), Err: err}
}

// send writes size pseudo-random bytes and closes: the guest reads to EOF.
func (s *DataServer) send(c net.Conn) transfer {
	h := sha256.New()
	r := mrand.NewChaCha8([32]byte{byte(time.Now().UnixNano())})
	n, err := io.CopyN(io.MultiWriter(c, h), r, s.size)
	return transfer{Bytes: n, Sum: hex.EncodeToString(h.Sum(nil)), Err: err}
}

func (s *DataServer) close() {
	for _, ln := range s.lns {
		ln.Close()
	}
	s.wg.Wait()
}

// results are what guest sent to the server and what it fetched; ok is
// false until both transfers ended.
func (s *DataServer) results(guest netip.Addr) (got, sent transfer, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok1 := s.got[guest]
	sent, ok2 := s.sent[guest]
	return got, sent, ok1 && ok2
}

// Check checks the transfers of the guest at addr both ways: the server
// got and sent its size in bytes without error, and the guest said the
// same of each (line returns its "tx" and "rx" console lines: "ok bytes=N
// sha256=HEX"). It says what differs with t.Errorf, naming the guest by
// name, and reports whether everything matched.
func (s *DataServer) Check(t testing.TB, name string, addr netip.Addr, line func(key string) (string, bool)) bool {
	t.Helper()
	got, sent, ok := s.results(addr)
	if !ok {
		t.Errorf("%s: the server saw no transfer both ways: got %+v, sent %+v", name, got, sent)
		return false
	}
	good := true
	for _, c := range []struct {
		key, what string
		tr        transfer
	}{{"tx", "to the server", got}, {"rx", "from the server", sent}} {
		said, _ := line(c.key)
		if want := fmt.Sprintf("ok bytes=%d sha256=%s", s.size, c.tr.Sum); said != want || c.tr.Bytes != s.size || c.tr.Err != nil {
			t.Errorf("%s, %s: the guest said %q; the server moved %d bytes (%v), sha256 %s", name, c.what, said, c.tr.Bytes, c.tr.Err, c.tr.Sum)
			good = false
		}
	}
	return good
}
