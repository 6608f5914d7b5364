package vhostuser

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// A port without a socket over one region of Go memory, its rings started
// at fixed places: for driving the data path with arbitrary ring contents.
const (
	fzGPA     = 0x40000
	fzSize    = 0x10000
	fzNum     = 16
	fzRings   = 0x2000 // both rings live below this offset
	fzRxDesc  = 0x0000
	fzRxAvail = 0x0400
	fzRxUsed  = 0x0800
	fzTxDesc  = 0x1000
	fzTxAvail = 0x1400
	fzTxUsed  = 0x1800
)

type memPort struct {
	*Port
	backing []byte
	mem     []byte
}

func newMemPort(t testing.TB, features uint64, rings []byte) *memPort {
	mp := &memPort{backing: bytes.Repeat([]byte{0xee}, fzSize+2*guard)}
	mp.mem = mp.backing[guard : guard+fzSize : guard+fzSize]
	clear(mp.mem)
	copy(mp.mem, rings)
	p := &Port{log: slog.New(slog.DiscardHandler), epfd: -1, wakefd: -1, events: make(chan Event, 8)}
	if err := p.openFds(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.closeFds)
	p.offered = SupportedFeatures
	p.useFeatures(features)
	p.mem.regions[0] = region{gpa: fzGPA, uaddr: 0x7f0000000000, size: fzSize, mem: mp.mem}
	p.mem.n = 1
	for i, a := range [2][3]uint64{{fzRxDesc, fzRxAvail, fzRxUsed}, {fzTxDesc, fzTxAvail, fzTxUsed}} {
		r := &p.rings[i]
		r.kick, r.call, r.errFd, r.w = -1, -1, -1, newWalker()
		r.num, r.enabled, r.addrSet = fzNum, true, true
		r.addr = vringAddr{desc: 0x7f0000000000 + a[0], avail: 0x7f0000000000 + a[1], used: 0x7f0000000000 + a[2]}
		if err := r.setup(&p.mem, features); err != nil {
			t.Fatal(err)
		}
		r.start(i == rxRing)
	}
	p.refreshActive()
	mp.Port = p
	return mp
}

func (mp *memPort) guardsIntact() bool {
	return bytes.Equal(mp.backing[:guard], bytes.Repeat([]byte{0xee}, guard)) &&
		bytes.Equal(mp.backing[guard+fzSize:], bytes.Repeat([]byte{0xee}, guard))
}

// The guest-written parts of the rings, in the order fuzz input fills
// them: descriptor tables, available rings (with used_event) and used
// rings (with avail_event; their index is where the port starts).
var fzParts = [][2]int{
	{fzTxDesc, descSize * fzNum}, {fzTxAvail, ringHdr + 2*fzNum + 2}, {fzTxUsed, ringHdr + usedElemSize*fzNum + 2},
	{fzRxDesc, descSize * fzNum}, {fzRxAvail, ringHdr + 2*fzNum + 2}, {fzRxUsed, ringHdr + usedElemSize*fzNum + 2},
}

// ringsFrom lays compact fuzz input out over the ring memory.
func ringsFrom(in []byte) []byte {
	m := make([]byte, fzRings)
	for _, part := range fzParts {
		in = in[copy(m[part[0]:part[0]+part[1]], in):]
	}
	return m
}

// compact is ringsFrom's inverse, for seeds.
func compact(m []byte) []byte {
	var in []byte
	for _, part := range fzParts {
		in = append(in, m[part[0]:part[0]+part[1]]...)
	}
	return in
}

// A well-formed seed: transmit descriptors 0..3 each a frame, receive
// descriptors 0..7 each a 1 KiB buffer, all available.
func fuzzSeedRings() []byte {
	m := make([]byte, fzRings)
	for i := range 4 {
		putDesc(m[fzTxDesc:], i, fzGPA+0x2000+uint64(i)*0x800, 12+60+uint32(i)*100, 0, 0)
		binary.LittleEndian.PutUint16(m[fzTxAvail+4+2*i:], uint16(i))
	}
	binary.LittleEndian.PutUint16(m[fzTxAvail+2:], 4)
	for i := range 8 {
		putDesc(m[fzRxDesc:], i, fzGPA+0x6000+uint64(i)*0x400, 0x400, descFlagWrite, 0)
		binary.LittleEndian.PutUint16(m[fzRxAvail+4+2*i:], uint16(i))
	}
	binary.LittleEndian.PutUint16(m[fzRxAvail+2:], 8)
	return m
}

// FuzzDataPath: whatever the guest puts in its rings (descriptors,
// indices, flags, event indices) and whatever the frames, Read and Write
// never panic, never touch memory outside the guest's, return only the
// documented errnos, and stop the port exactly when they say ErrBroken.
func FuzzDataPath(f *testing.F) {
	all := SupportedFeatures
	seed := compact(fuzzSeedRings())
	f.Add(seed, []byte{0, 1, 2, 3}, all)
	f.Add(seed, []byte{1, 1, 1, 0, 0}, all&^(1<<FeatureNetMrgRxbuf|1<<FeatureRingEventIdx))
	f.Add(seed, []byte{0x81, 0x42}, all&^(1<<FeatureRingIndirectDesc))
	f.Fuzz(func(t *testing.T, rings []byte, ops []byte, features uint64) {
		features &= SupportedFeatures
		mp := newMemPort(t, features, ringsFrom(rings))
		rb := make([][]byte, 8)
		for i := range rb {
			rb[i] = make([]byte, 16+700)
		}
		sizes := make([]int, 8)
		for i, op := range ops {
			var n int
			var err error
			if op&1 == 0 {
				n, err = mp.Read(rb[:1+int(op>>1)%8], sizes, 16)
				for _, s := range sizes[:n] {
					if s < vnethdr.Len {
						t.Fatalf("frame size %d", s)
					}
				}
			} else {
				h := vnethdr.Hdr{Flags: op >> 5 & 3, GSOType: []uint8{0, 1, 4, 5, 0x81}[int(op>>2)%5]}
				w := make([]byte, vnethdr.Len+14+int(op)*37)
				h.Encode(w)
				w[vnethdr.Len+12], w[vnethdr.Len+13] = 0x86, 0xdd
				n, err = mp.Write([][]byte{w, w}, 0)
			}
			switch err {
			case nil, unix.EAGAIN, unix.EOPNOTSUPP, unix.EMSGSIZE, unix.ENETDOWN:
			case ErrBroken:
				if mp.State() != StateBroken || !mp.rings[0].broken.Load() || !mp.rings[1].broken.Load() {
					t.Fatalf("op %d: ErrBroken without the port stopped", i)
				}
			default:
				t.Fatalf("op %d: unexpected error %v (n %d)", i, err, n)
			}
			if !mp.guardsIntact() {
				t.Fatalf("op %d: memory outside the guest's changed", i)
			}
		}
	})
}

// The data path allocates nothing, also when the guest breaks nothing
// but runs out of room or sends oversize frames.
func TestDataPathNoAllocs(t *testing.T) {
	mp := newMemPort(t, SupportedFeatures, fuzzSeedRings())
	rb := [][]byte{make([]byte, 100), make([]byte, 2000)}
	sizes := make([]int, 2)
	w := make([]byte, vnethdr.Len+500)
	n := testing.AllocsPerRun(100, func() {
		mp.Read(rb, sizes, 0)
		mp.Write([][]byte{w}, 0)
	})
	if n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
