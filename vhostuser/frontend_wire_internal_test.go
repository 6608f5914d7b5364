package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// decoded is one request as the port's own reader and decoder see it.
type decoded struct {
	m    message
	nfds int
}

// scriptedBackEnd accepts one front-end on ln and decodes its requests
// with readMsg and parseMessage (two rings) until it hangs up, answering
// the GET requests (features offered, protocol features proto, one queue
// pair, GET_VRING_BASE with base 7) and every REPLY_ACK with success.
func scriptedBackEnd(ln *net.UnixListener, offered, proto uint64) ([]decoded, error) {
	c, err := ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var in wireMsg
	var out []decoded
	oob := make([]byte, unix.CmsgSpace(maxFds*4))
	for {
		if err := readMsg(c, &in, oob); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return out, err
		}
		m, err := parseMessage(in.hdr[:], in.payload[:in.size], len(in.fds), 2)
		closeFds(in.fds)
		if err != nil {
			return out, err
		}
		out = append(out, decoded{m, len(in.fds)})
		var reply []byte
		switch {
		case m.req == reqGetFeatures:
			reply = binary.NativeEndian.AppendUint64(nil, offered)
		case m.req == reqGetProtocolFeatures:
			reply = binary.NativeEndian.AppendUint64(nil, proto)
		case m.req == reqGetQueueNum:
			reply = binary.NativeEndian.AppendUint64(nil, 1)
		case m.req == reqGetVringBase:
			reply = binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, m.state.index), 7)
		case m.needReply:
			reply = make([]byte, 8)
		default:
			continue
		}
		if _, err := c.Write(putReply(make([]byte, hdrSize+len(reply)), m.req, reply)); err != nil {
			return out, err
		}
	}
}

// TestFrontEndWire: what vhostusertest's front-end sends, QEMU 7.2's
// sequence, decodes with the port's own reader and decoder into the
// values the front-end holds: the features it acknowledged, its memory
// table (one region: the memfd, its size, its guest and user addresses),
// each ring's size and addresses, one fd with every kick, call and memory
// table; and the bases GET_VRING_BASE answered come back from Stop.
func TestFrontEndWire(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wire.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const offered = SupportedFeatures | 1<<FeatureProtocolFeatures
	const proto = SupportedProtocolFeatures | 1<<1 // and LOG_SHMFD, which the front-end leaves
	done := make(chan []decoded, 1)
	errc := make(chan error, 1)
	go func() {
		got, err := scriptedBackEnd(ln, offered, proto)
		done <- got
		errc <- err
	}()
	d, err := vhostusertest.Dial(path, vhostusertest.Config{QueueSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	bases, err := d.Stop()
	if err != nil || fmt.Sprint(bases) != "[7 7]" {
		t.Errorf("Stop: bases %v, %v; want [7 7]", bases, err)
	}
	base, size := d.UserAddr(0), uint64(len(d.Mem()))
	d.Close()
	got := <-done
	if err := <-errc; err != nil {
		t.Fatalf("the port's decoder refused the front-end: %v", err)
	}
	checkWireSequence(t, got)
	checkWireValues(t, d, got, proto&^(1<<1), base, size)
}

// checkWireSequence checks the requests in got, in order, with their rings.
func checkWireSequence(t *testing.T, got []decoded) {
	t.Helper()
	var names []string
	for _, g := range got {
		n := reqName(g.m.req)
		if g.m.ring >= 0 && strings.Contains(n, "VRING") {
			n += fmt.Sprint(" ", g.m.ring)
		}
		names = append(names, n)
	}
	want := "GET_FEATURES GET_PROTOCOL_FEATURES SET_PROTOCOL_FEATURES GET_QUEUE_NUM SET_OWNER GET_FEATURES " +
		"SET_VRING_CALL 0 SET_VRING_ERR 0 SET_VRING_CALL 1 SET_VRING_ERR 1 SET_VRING_ENABLE 0 SET_VRING_ENABLE 1 " +
		"SET_FEATURES SET_MEM_TABLE " +
		"SET_VRING_NUM 0 SET_VRING_BASE 0 SET_VRING_ADDR 0 SET_VRING_KICK 0 SET_VRING_CALL 0 " +
		"SET_VRING_NUM 1 SET_VRING_BASE 1 SET_VRING_ADDR 1 SET_VRING_KICK 1 SET_VRING_CALL 1 " +
		"SET_VRING_ENABLE 0 SET_VRING_ENABLE 1 GET_VRING_BASE 0 GET_VRING_BASE 1"
	if s := strings.Join(names, " "); s != want {
		t.Errorf("requests:\n%s\nwant\n%s", s, want)
	}
}

// checkWireValues checks the values in got against d's, whose memory
// (closed by now) was size bytes at user address base.
func checkWireValues(t *testing.T, d *vhostusertest.Driver, got []decoded, proto, base, size uint64) {
	t.Helper()
	for _, g := range got {
		m := g.m
		switch m.req {
		case reqSetProtocolFeatures:
			if m.u64 != proto || d.Proto != proto {
				t.Errorf("SET_PROTOCOL_FEATURES %#x, front-end's %#x, want %#x", m.u64, d.Proto, proto)
			}
		case reqSetFeatures:
			if m.u64 != d.Acked || m.u64&(1<<FeatureVersion1) == 0 {
				t.Errorf("SET_FEATURES %#x, front-end acked %#x", m.u64, d.Acked)
			}
		case reqSetMemTable:
			want := regionDesc{gpa: 1 << 30, size: size, uaddr: base}
			if m.nregions != 1 || m.regions[0] != want || g.nfds != 1 || !m.needReply {
				t.Errorf("SET_MEM_TABLE %d regions %+v, %d fds, need_reply %v; want %+v, 1 fd", m.nregions, m.regions[0], g.nfds, m.needReply, want)
			}
		case reqSetVringNum:
			if m.state.num != 64 {
				t.Errorf("SET_VRING_NUM %d: %d, want 64", m.ring, m.state.num)
			}
		case reqSetVringAddr:
			_, desc, avail, used := d.Ring(m.ring)
			a := m.addr
			if a.desc != base+uint64(desc) || a.avail != base+uint64(avail) || a.used != base+uint64(used) || a.flags != 0 {
				t.Errorf("SET_VRING_ADDR %d: %+v, want desc %#x avail %#x used %#x", m.ring, a, base+uint64(desc), base+uint64(avail), base+uint64(used))
			}
		case reqSetVringKick, reqSetVringCall, reqSetVringErr:
			if m.noFd || g.nfds != 1 {
				t.Errorf("%s %d: no-fd flag %v, %d fds", reqName(m.req), m.ring, m.noFd, g.nfds)
			}
		case reqSetVringEnable:
			if m.state.num != 1 || !m.needReply {
				t.Errorf("SET_VRING_ENABLE %d: %d, need_reply %v", m.ring, m.state.num, m.needReply)
			}
		}
	}
}
