package vhostusertest

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// started is a driver of one queue pair with queue size 16 whose rings are
// set up as Start sets them up, without a port: the test plays the port.
func started(t *testing.T) *Driver {
	t.Helper()
	d, err := newDriver(Config{QueueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.HdrLen = 12
	d.r[RX].init(d.mem, 0, d.num)
	d.r[TX].init(d.mem, 0, d.num/txDescs)
	return d
}

// at is the memory at guest physical address gpa, n bytes, as a port maps it.
func at(t *testing.T, d *Driver, gpa uint64, n uint32) []byte {
	t.Helper()
	off := gpa - d.gpa
	if gpa < d.gpa || off+uint64(n) > uint64(len(d.mem)) {
		t.Fatalf("address %#x+%d outside the guest's memory", gpa, n)
	}
	return d.mem[off : off+uint64(n)]
}

// walk reads the chain at head of table (a descriptor table at guest
// address tableGPA) as a port does, following next and one indirect
// table, and returns the bytes it holds.
func walk(t *testing.T, d *Driver, tableGPA uint64, head uint16) []byte {
	t.Helper()
	var out []byte
	for i, n := head, 0; ; n++ {
		desc := at(t, d, tableGPA+16*uint64(i), 16)
		addr, l := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint32(desc[8:])
		flags, next := binary.LittleEndian.Uint16(desc[12:]), binary.LittleEndian.Uint16(desc[14:])
		if flags&descIndirect != 0 {
			return walk(t, d, addr, 0)
		}
		out = append(out, at(t, d, addr, l)...)
		if flags&descNext == 0 || n > 16 {
			return out
		}
		i = next
	}
}

// TestSendLayouts: a frame sent Flat, Split or Indirect is, followed as a
// port follows descriptors, the header padded to the guest's 12 bytes and
// the frame; each is published on the available ring, with a kick while
// the port has not asked for none, and its slot comes back once the port
// marks it used.
func TestSendLayouts(t *testing.T) {
	d := started(t)
	r := &d.r[TX]
	frame := bytes.Repeat([]byte("0123456789"), 20)
	for k, l := range []Layout{Flat, Split, Indirect} {
		if err := d.Send([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, frame, l); err != nil {
			t.Fatal(err)
		}
		idx := binary.LittleEndian.Uint16(d.mem[r.avail+2:])
		head := binary.LittleEndian.Uint16(d.mem[r.avail+4+2*k:])
		if idx != uint16(k+1) || head%txDescs != 0 {
			t.Fatalf("layout %d: avail idx %d head %d", l, idx, head)
		}
		got := walk(t, d, d.GPA(r.desc), head)
		want := append([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0}, frame...)
		if !bytes.Equal(got, want) {
			t.Errorf("layout %d: the port would read %d bytes %x..., want %d", l, len(got), got[:min(len(got), 16)], len(want))
		}
		// the port uses it
		e := d.mem[r.used+4+8*k:]
		binary.LittleEndian.PutUint32(e, uint32(head))
		binary.LittleEndian.PutUint16(d.mem[r.used+2:], uint16(k+1))
		if n := d.ReclaimTx(); n != 1 {
			t.Errorf("layout %d: reclaimed %d, want 1", l, n)
		}
	}
	if d.Kicks(TX) != 3 || len(r.free) != d.num/txDescs {
		t.Errorf("kicks %d, free slots %d", d.Kicks(TX), len(r.free))
	}
	var v [8]byte
	if n, err := unix.Read(d.KickFd(TX), v[:]); err != nil || n != 8 || binary.NativeEndian.Uint64(v[:]) != 3 {
		t.Errorf("kick eventfd: %d %v %x", n, err, v)
	}
	// a port that asks for no kicks (VRING_USED_F_NO_NOTIFY) gets none
	binary.LittleEndian.PutUint16(d.mem[r.used:], 1)
	d.Send(nil, frame, Flat)
	if d.Kicks(TX) != 3 {
		t.Errorf("kicked %d times with NO_NOTIFY set", d.Kicks(TX))
	}
}

// TestRecv: receive buffers posted are device-writable descriptors of
// RxBufSize in the available ring; what the port writes to one and marks
// used comes back from Recv as header and frame, and the buffer is free to
// post again.
func TestRecv(t *testing.T) {
	d := started(t)
	r := &d.r[RX]
	if n := d.FillRx(); n != d.num {
		t.Fatalf("FillRx posted %d, want %d", n, d.num)
	}
	head := binary.LittleEndian.Uint16(d.mem[r.avail+4:])
	desc := d.mem[r.desc+16*int(head):]
	addr, l, flags := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint32(desc[8:]), binary.LittleEndian.Uint16(desc[12:])
	if l != 2048 || flags != descWrite {
		t.Fatalf("receive descriptor: len %d flags %d", l, flags)
	}
	if _, _, ok, err := d.Recv(make([]byte, 100)); ok || err != nil {
		t.Fatalf("Recv before the port used a buffer: %v %v", ok, err)
	}
	// the port writes a 12-byte header and a frame and marks it used
	buf := at(t, d, addr, l)
	copy(buf, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0})
	copy(buf[12:], "a frame for the guest")
	binary.LittleEndian.PutUint32(d.mem[r.used+4:], uint32(head))
	binary.LittleEndian.PutUint32(d.mem[r.used+8:], 12+21)
	binary.LittleEndian.PutUint16(d.mem[r.used+2:], 1)
	dst := make([]byte, 100)
	hdr, n, ok, err := d.Recv(dst)
	if !ok || err != nil || string(dst[:n]) != "a frame for the guest" || hdr[10] != 1 {
		t.Errorf("Recv: %q header %x ok %v err %v", dst[:n], hdr, ok, err)
	}
	if n := d.PostRx(5); n != 1 {
		t.Errorf("after Recv, %d buffers to post again, want 1", n)
	}
}

// TestLayout: every ring's parts and every buffer lie in the memory
// without overlapping, used rings on pages of their own; a queue size
// that is no power of two is refused.
func TestLayout(t *testing.T) {
	d, err := newDriver(Config{QueueSize: 64, QueuePairs: 2, RxBufSize: 1024, TxSlot: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	type span struct {
		name     string
		off, end int
	}
	var spans []span
	for i, r := range d.r {
		if r.used%4096 != 0 || r.desc%16 != 0 {
			t.Errorf("ring %d: desc %#x used %#x", i, r.desc, r.used)
		}
		spans = append(spans, span{"desc", r.desc, r.desc + 16*64}, span{"avail", r.avail, r.avail + 6 + 2*64}, span{"used", r.used, r.used + 6 + 8*64})
	}
	for k := range d.txOff {
		spans = append(spans, span{"tx", d.txOff[k], d.txOff[k] + 64/txDescs*4096}, span{"rx", d.rxOff[k], d.rxOff[k] + 64*1024})
	}
	for i, a := range spans {
		if a.end > len(d.mem) {
			t.Errorf("%s %d ends at %#x, past the memory (%#x)", a.name, i, a.end, len(d.mem))
		}
		for _, b := range spans[i+1:] {
			if a.off < b.end && b.off < a.end {
				t.Errorf("%s %+v overlaps %s %+v", a.name, a, b.name, b)
			}
		}
	}
	if _, err := newDriver(Config{QueueSize: 100}); err == nil || !strings.Contains(err.Error(), "queue size 100") {
		t.Errorf("queue size 100: %v", err)
	}
}
