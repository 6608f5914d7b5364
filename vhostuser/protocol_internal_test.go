package vhostuser

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/eventfd"
)

// msg encodes a request header and payload.
func msg(req, flags uint32, payload ...[]byte) ([]byte, []byte) {
	var p []byte
	for _, b := range payload {
		p = append(p, b...)
	}
	h := binary.NativeEndian.AppendUint32(nil, req)
	h = binary.NativeEndian.AppendUint32(h, flags)
	h = binary.NativeEndian.AppendUint32(h, uint32(len(p)))
	return h, p
}

func le32s(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.NativeEndian.AppendUint32(b, x)
	}
	return b
}

func le64s(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.NativeEndian.AppendUint64(b, x)
	}
	return b
}

func TestParseMessage(t *testing.T) {
	region := func(gpa, size, uaddr, off uint64) []byte { return le64s(gpa, size, uaddr, off) }
	cases := []struct {
		name  string
		req   uint32
		flags uint32
		p     []byte
		fds   int
		want  string // "" for accepted
	}{
		{"get features", reqGetFeatures, 1, nil, 0, ""},
		{"need reply", reqSetOwner, 1 | flagNeedReply, nil, 0, ""},
		{"version 0", reqSetOwner, 0, nil, 0, "version 0"},
		{"version 3", reqSetOwner, 3, nil, 0, "version 3"},
		{"reply flag", reqGetFeatures, 1 | flagReply, nil, 0, "reply flag"},
		{"unknown flag", reqSetOwner, 1 | 1<<31, nil, 0, "unknown header flags"},
		{"payload where none", reqGetFeatures, 1, le64s(0), 0, "want 0"},
		{"set features", reqSetFeatures, 1, le64s(1 << 32), 0, ""},
		{"set features short", reqSetFeatures, 1, le32s(1), 0, "want 8"},
		{"vring num", reqSetVringNum, 1, le32s(1, 256), 0, ""},
		{"vring num 0", reqSetVringNum, 1, le32s(1, 0), 0, "power of two"},
		{"vring num 3", reqSetVringNum, 1, le32s(1, 3), 0, "power of two"},
		{"vring num 65536", reqSetVringNum, 1, le32s(1, 65536), 0, "power of two"},
		{"vring num 32768", reqSetVringNum, 1, le32s(0, 32768), 0, ""},
		{"vring index 2: beyond", reqSetVringNum, 1, le32s(2, 256), 0, ""},
		{"vring num 0 beyond: unchecked", reqSetVringNum, 1, le32s(3, 0), 0, ""},
		{"vring index 256", reqSetVringNum, 1, le32s(256, 256), 0, "ring 256, at most 255"},
		{"vring base", reqSetVringBase, 1, le32s(0, 0xffff), 0, ""},
		{"vring base wrap bit", reqSetVringBase, 1, le32s(0, 0x18000), 0, "16-bit"},
		{"get vring base", reqGetVringBase, 1, le32s(1, 0), 0, ""},
		{"enable", reqSetVringEnable, 1, le32s(1, 1), 0, ""},
		{"enable 7", reqSetVringEnable, 1, le32s(1, 7), 0, "enable value"},
		{"addr", reqSetVringAddr, 1, append(le32s(1, 0), le64s(0x1000, 0x3000, 0x2000, 0)...), 0, ""},
		{"addr flags", reqSetVringAddr, 1, append(le32s(1, 1), le64s(0x1000, 0x3000, 0x2000, 0)...), 0, "dirty logging"},
		{"addr desc misaligned", reqSetVringAddr, 1, append(le32s(1, 0), le64s(0x1008, 0x3000, 0x2000, 0)...), 0, "misaligned"},
		{"addr used misaligned", reqSetVringAddr, 1, append(le32s(1, 0), le64s(0x1000, 0x3002, 0x2000, 0)...), 0, "misaligned"},
		{"addr avail odd", reqSetVringAddr, 1, append(le32s(1, 0), le64s(0x1000, 0x3000, 0x2001, 0)...), 0, "misaligned"},
		{"addr ring 9: beyond, unchecked", reqSetVringAddr, 1, append(le32s(9, 1), le64s(0x1001, 0, 0, 0)...), 0, ""},
		{"addr ring 300", reqSetVringAddr, 1, append(le32s(300, 0), le64s(0x1000, 0x3000, 0x2000, 0)...), 0, "ring 300"},
		{"kick", reqSetVringKick, 1, le64s(1), 1, ""},
		{"kick no fd flag", reqSetVringKick, 1, le64s(1 | 1<<8), 0, ""},
		{"kick no fd flag with fd", reqSetVringKick, 1, le64s(1 | 1<<8), 1, "1 file descriptors, want 0"},
		{"kick without fd", reqSetVringKick, 1, le64s(1), 0, "0 file descriptors, want 1"},
		{"call two fds", reqSetVringCall, 1, le64s(0), 2, "2 file descriptors, want 1"},
		{"err ring 3: beyond", reqSetVringErr, 1, le64s(3), 1, ""},
		{"get queue num", reqGetQueueNum, 1, nil, 0, ""},
		{"kick high bits", reqSetVringKick, 1, le64s(1 << 40), 1, "unknown bits"},
		{"mem table", reqSetMemTable, 1, append(le32s(1, 0), region(0, 1<<20, 0x7f0000000000, 0)...), 1, ""},
		{"mem table two", reqSetMemTable, 1, append(le32s(2, 0), append(region(0, 0xa0000, 0x7f0000000000, 0),
			region(0x100000, 1<<30, 0x7f0000100000, 0x100000)...)...), 2, ""},
		{"mem table fd count", reqSetMemTable, 1, append(le32s(1, 0), region(0, 1<<20, 0x7f0000000000, 0)...), 2, "2 file descriptors, want 1"},
		{"mem table zero regions", reqSetMemTable, 1, le32s(0, 0), 0, "0 regions"},
		{"mem table nine regions", reqSetMemTable, 1, le32s(9, 0), 9, "9 regions"},
		{"mem table count beyond payload", reqSetMemTable, 1, append(le32s(2, 0), region(0, 1<<20, 0x7f0000000000, 0)...), 2, "want 72"},
		{"mem table short", reqSetMemTable, 1, le32s(1), 1, "too short"},
		{"empty region", reqSetMemTable, 1, append(le32s(1, 0), region(0, 0, 0x7f0000000000, 0)...), 1, "empty"},
		{"region gpa wraps", reqSetMemTable, 1, append(le32s(1, 0), region(^uint64(0)-10, 100, 0x7f0000000000, 0)...), 1, "wrapping"},
		{"region uaddr wraps", reqSetMemTable, 1, append(le32s(1, 0), region(0, 100, ^uint64(0), 0)...), 1, "wrapping"},
		{"region offset wraps", reqSetMemTable, 1, append(le32s(1, 0), region(0, 100, 0, ^uint64(0)-1)...), 1, "wrapping"},
		{"regions overlap in gpa", reqSetMemTable, 1, append(le32s(2, 0), append(region(0, 0x2000, 0x10000, 0),
			region(0x1000, 0x2000, 0x20000, 0)...)...), 2, "overlap"},
		{"regions overlap in uaddr", reqSetMemTable, 1, append(le32s(2, 0), append(region(0, 0x2000, 0x10000, 0),
			region(0x10000, 0x2000, 0x11000, 0)...)...), 2, "overlap"},
		{"mtu", reqNetSetMTU, 1, le64s(1500), 0, ""},
		{"log base", reqSetLogBase, 1, le64s(0), 0, "not supported"},
		{"unknown", 200, 1, nil, 0, "not supported"},
		{"oversized", reqSetFeatures, 1, make([]byte, maxPayload+1), 0, "at most"},
	}
	for _, c := range cases {
		h, p := msg(c.req, c.flags, c.p)
		m, err := parseMessage(h, p, c.fds, 2)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case err == nil && m.beyond != strings.Contains(c.name, "beyond"):
			t.Errorf("%s: ring %d beyond %v", c.name, m.ring, m.beyond)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrProtocol)):
			t.Errorf("%s: got %v, want ErrProtocol saying %q", c.name, err, c.want)
		}
	}
	// The header's size must match the payload read.
	h, p := msg(reqSetFeatures, 1, le64s(1))
	if _, err := parseMessage(h, p[:4], 0, 2); err == nil {
		t.Error("size mismatch accepted")
	}
}

// FuzzParseMessage: any bytes parse or fail with ErrProtocol, never panic,
// and what parses satisfies every rule the handlers rely on. What parses
// is handled, on a port of its own of 1 to 4 queue pairs, with fds of the
// kinds given (kinds[i] for fd i): a kick, call or error fd is taken only
// if it is an eventfd, guest memory only from a regular file on tmpfs or
// hugetlbfs, a ring beyond the port's is refused without an error (its fds
// closed, GET_VRING_BASE answered), every error is ErrProtocol, and no fd
// is left open.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []struct {
		req   uint32
		p     []byte
		kinds []byte
	}{
		{reqGetFeatures, nil, nil}, {reqSetFeatures, le64s(1 << 32), nil}, {reqSetVringNum, le32s(1, 256), nil},
		{reqSetVringAddr, append(le32s(1, 0), le64s(0x1000, 0x3000, 0x2000, 0)...), nil},
		{reqSetVringKick, le64s(1), []byte{fdEventfd}}, {reqSetVringKick, le64s(0), []byte{fdPipeHungUp}},
		{reqSetVringCall, le64s(1 << 8), nil}, {reqSetVringCall, le64s(1), []byte{fdSocket}},
		{reqSetVringErr, le64s(0), []byte{fdEventfd}},
		{reqSetMemTable, append(le32s(1, 0), le64s(0, 1<<20, 0x7f0000000000, 0)...), []byte{fdMemfd}},
		{reqSetMemTable, append(le32s(1, 0), le64s(0, 1<<20, 0x7f0000000000, 0)...), []byte{fdDiskFile}},
		{reqSetMemTable, append(le32s(2, 0), le64s(0, 0x1000, 0x10000, 0, 0x1000, 0x1000, 0x11000, 0x1000)...), []byte{fdMemfd, fdEventfd}},
		// Multiqueue: what DPDK's virtio-user sends with queues=2.
		{reqGetQueueNum, nil, nil}, {reqSetVringCall, le64s(2), []byte{fdEventfd}},
		{reqSetVringNum, le32s(3, 0), nil}, {reqSetVringEnable, le32s(3, 1), nil}, {reqGetVringBase, le32s(5, 0), nil},
		{reqSetVringKick, le64s(7), []byte{fdPipeHungUp}},
	} {
		h, p := msg(s.req, 1, s.p)
		f.Add(append(h, p...), s.kinds, uint8(0))
		f.Add(append(h, p...), s.kinds, uint8(1))
	}
	f.Fuzz(func(t *testing.T, b []byte, kinds []byte, pairs uint8) {
		if len(b) < hdrSize {
			return
		}
		kinds = kinds[:min(len(kinds), maxFds+1)]
		np := 1 + int(pairs)%4
		m, err := parseMessage(b[:hdrSize], b[hdrSize:], len(kinds), 2*np)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error without ErrProtocol: %v", err)
			}
			return
		}
		checkParsed(t, m, b, len(kinds), 2*np)
		checkHandled(t, &m, kinds, np)
	})
}

// Kinds of fds a front-end may hand over.
const (
	fdEventfd    = iota // what every ring fd must be
	fdPipeHungUp        // the read end of a pipe whose write end is closed
	fdSocket            // a unix socket, blocking, with SO_RCVLOWAT 8 and a byte waiting
	fdMemfd             // 1 MiB of memfd
	fdDiskFile          // 1 MiB in a file on the temporary directory's file system
	fdKinds
)

// makeFd makes an fd of kind k and returns it, the fds to close after, and
// whether it is a regular file guest memory may be in.
func makeFd(t *testing.T, k byte) (fd int, keep []int, memory bool) {
	var err error
	switch k % fdKinds {
	case fdEventfd:
		fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
	case fdPipeHungUp:
		var p [2]int
		err = unix.Pipe2(p[:], unix.O_CLOEXEC)
		unix.Close(p[1])
		fd = p[0]
	case fdSocket:
		var sp [2]int
		if sp, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err == nil {
			unix.SetsockoptInt(sp[0], unix.SOL_SOCKET, unix.SO_RCVLOWAT, 8)
			unix.Write(sp[1], []byte{1})
			fd, keep = sp[0], sp[1:]
		}
	case fdMemfd, fdDiskFile:
		if k%fdKinds == fdMemfd {
			fd, err = unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC)
		} else {
			fd, err = unix.Open(os.TempDir(), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		}
		if err == nil {
			err = unix.Ftruncate(fd, 1<<20)
		}
		var fs unix.Statfs_t
		unix.Fstatfs(fd, &fs)
		memory = fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.HUGETLBFS_MAGIC
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd, keep, memory
}

// checkHandled hands m with fds of the given kinds to a port of its own,
// of pairs queue pairs.
func checkHandled(t *testing.T, m *message, kinds []byte, pairs int) {
	p := makePort(Config{QueuePairs: pairs})
	var err error
	if p.sig, err = signals(); err != nil { // the process's, made once
		t.Fatal(err)
	}
	before := openFds(t)
	if err := p.openFds(); err != nil {
		t.Fatal(err)
	}
	var fds, keep []int
	memory := true
	for _, k := range kinds {
		fd, kp, mem := makeFd(t, k)
		fds, keep, memory = append(fds, fd), append(keep, kp...), memory && mem
	}
	out, status, err := p.handle(m, fds)
	if err != nil && !errors.Is(err, ErrProtocol) {
		t.Fatalf("%s: error without ErrProtocol: %v", reqName(m.req), err)
	}
	switch {
	case m.beyond:
		if err != nil || (m.req == reqGetVringBase) != (out != nil) || out == nil && status == 0 {
			t.Fatalf("%s for ring %d of %d: %v, reply %x, status %d", reqName(m.req), m.ring, len(p.rings), err, out, status)
		}
		if p.Stats().ProtocolErrors != 1 {
			t.Fatal("a ring beyond the port's not counted")
		}
	case m.req == reqGetQueueNum:
		if len(out) != hdrSize+8 || binary.NativeEndian.Uint64(out[hdrSize:]) != uint64(pairs) {
			t.Fatalf("GET_QUEUE_NUM of %d pairs: %x", pairs, out)
		}
	}
	switch {
	case m.beyond:
	case m.req == reqSetVringKick || m.req == reqSetVringCall || m.req == reqSetVringErr:
		r := &p.rings[m.ring]
		for _, slot := range []int{r.kick, r.call, r.errFd} {
			if slot >= 0 && eventfd.Check(slot) != nil {
				t.Fatalf("%s took an fd that is no eventfd", reqName(m.req))
			}
		}
		if len(kinds) == 1 && kinds[0]%fdKinds != fdEventfd && (err == nil || !strings.Contains(err.Error(), "not an eventfd")) {
			t.Fatalf("%s with fd kind %d: %v", reqName(m.req), kinds[0]%fdKinds, err)
		}
	case m.req == reqSetMemTable:
		if err == nil && !memory {
			t.Fatal("guest memory taken from a file not in memory")
		}
	}
	p.mu.Lock()
	p.teardown()
	p.mu.Unlock()
	p.closeFds()
	closeFds(keep)
	if after := openFds(t); after != before {
		t.Fatalf("%s: %d fds open after, %d before", reqName(m.req), after, before)
	}
}

func openFds(t *testing.T) int {
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(e)
}

func checkParsed(t *testing.T, m message, b []byte, nfds, rings int) {
	if int(binary.NativeEndian.Uint32(b[8:])) != len(b)-hdrSize || len(b)-hdrSize > maxPayload {
		t.Fatal("size mismatch accepted")
	}
	if nfds < 0 || nfds > maxFds {
		t.Fatalf("%d fds accepted", nfds)
	}
	switch m.req {
	case reqSetVringNum, reqSetVringBase, reqGetVringBase, reqSetVringEnable, reqSetVringAddr,
		reqSetVringKick, reqSetVringCall, reqSetVringErr:
		if m.ring > maxRingIndex || m.beyond != (m.ring >= rings) {
			t.Fatalf("ring %d of %d, beyond %v", m.ring, rings, m.beyond)
		}
		if m.beyond {
			return
		}
	}
	switch m.req {
	case reqSetVringNum:
		if m.state.num == 0 || m.state.num > maxQueueSize || bits.OnesCount32(m.state.num) != 1 {
			t.Fatalf("queue size %d accepted", m.state.num)
		}
	case reqSetVringAddr:
		if m.addr.desc%16 != 0 || m.addr.used%4 != 0 || m.addr.avail%2 != 0 {
			t.Fatalf("addresses %+v accepted", m.addr)
		}
	case reqSetVringKick, reqSetVringCall, reqSetVringErr:
		if (nfds == 1) == m.noFd {
			t.Fatalf("ring %d nofd %v with %d fds accepted", m.ring, m.noFd, nfds)
		}
	case reqSetMemTable:
		if m.nregions < 1 || m.nregions > maxRegions || m.nregions != nfds {
			t.Fatalf("%d regions with %d fds accepted", m.nregions, nfds)
		}
		for i, r := range m.regions[:m.nregions] {
			if r.size == 0 || r.gpa+r.size < r.gpa || r.uaddr+r.size < r.uaddr || r.mmapOffset+r.size < r.mmapOffset {
				t.Fatalf("region %+v accepted", r)
			}
			for _, o := range m.regions[:i] {
				if overlap(r.gpa, r.size, o.gpa, o.size) || overlap(r.uaddr, r.size, o.uaddr, o.size) {
					t.Fatal("overlapping regions accepted")
				}
			}
		}
	}
}
