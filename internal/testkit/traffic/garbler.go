package traffic

import (
	"encoding/binary"
	mrand "math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

// Garbler makes malformed frames: 14 bytes up to MTU+14 (a packet socket
// refuses anything shorter than the Ethernet header or longer than MTU+14,
// net/packet/af_packet.c: packet_snd), addressed to the TAP or broadcast.
type Garbler struct {
	rng          *mrand.Rand
	dst          [2]net.HardwareAddr // the TAP's, broadcast
	src          net.HardwareAddr
	srcIP, dstIP [4]byte
	mtu          int
	counts       map[string]int
	pool         []byte
}

// The kinds of malformed frame, chosen at random per frame.
var garbleKinds = []string{
	"random",         // random bytes after the MACs, random EtherType
	"ip-truncated",   // IPv4 EtherType, 0-19 bytes of IP header
	"ip-bad-ihl",     // IHL below 5 or past the end of the packet
	"ip-len-long",    // IPv4 total length larger than the frame
	"ip-len-short",   // IPv4 total length smaller than the frame (or than the header)
	"l4-truncated",   // valid IPv4 header, TCP/UDP/ICMP header cut short
	"ip-fragment",    // bogus fragment offsets and flags, bad header checksum
	"max-size",       // MTU+14 bytes: IPv4/TCP with random header fields
	"ipv6-garbled",   // IPv6 EtherType, truncated header or payload length wrong
	"vlan-tagged",    // an 802.1Q tag in front of one of the above
	"tiny",           // 14 to 20 bytes
	"ip-options",     // IPv4 options that run past the header
	"zero-ethertype", // EtherType 0 (an 802.3 length) and random LLC bytes
}

// NewGarbler makes frames from the wire of bed to its TAP's MAC or
// broadcast, from a fixed source MAC, with IPv4 addresses from the wire to
// the lab where a kind has them, drawn from a generator seeded from the
// clock (the seed goes to t's log).
func NewGarbler(t testing.TB, bed *testbed.Bed) *Garbler {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return newGarbler(bed, kernel.LinkMAC(t, bed.LabNS, bed.LabIf), seed)
}

// newGarbler is NewGarbler's Garbler for the TAP's MAC tap, from seed.
func newGarbler(bed *testbed.Bed, tap net.HardwareAddr, seed uint64) *Garbler {
	return &Garbler{
		rng:    mrand.New(mrand.NewPCG(seed, 7)),
		dst:    [2]net.HardwareAddr{tap, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		src:    net.HardwareAddr{0x02, 0xfa, 0x17, 0, 0, 1},
		srcIP:  bed.WireAddr.Addr().As4(),
		dstIP:  bed.LabAddr.Addr().As4(),
		mtu:    bed.MTU,
		counts: map[string]int{},
	}
}

// IntN draws from the garbler's generator: a number in [0, n).
func (g *Garbler) IntN(n int) int { return g.rng.IntN(n) }

// Kinds counts the frames made so far by kind.
func (g *Garbler) Kinds() map[string]int { return g.counts }

// fill copies random bytes into b from a pool made once: a loop over
// every byte would dominate the test's time under the race detector.
func (g *Garbler) fill(b []byte) {
	if g.pool == nil {
		g.pool = make([]byte, 1<<20)
		for i := 0; i+8 <= len(g.pool); i += 8 {
			binary.LittleEndian.PutUint64(g.pool[i:], g.rng.Uint64())
		}
	}
	copy(b, g.pool[g.IntN(len(g.pool)-len(b)):])
}

// Frame writes one malformed frame of a random kind into buf, which must
// hold MTU+14 bytes, and returns it.
func (g *Garbler) Frame(buf []byte) []byte {
	kind := garbleKinds[g.IntN(len(garbleKinds))]
	max := g.mtu + 14
	var f []byte
	if kind == "vlan-tagged" {
		// The receiving veth strips the tag before any packet socket
		// sees the frame (net/core/dev.c: __netif_receive_skb_core ->
		// skb_vlan_untag) and frees, without counting it anywhere, a
		// frame with fewer than 6 bytes after the Ethernet header (the
		// tag and the two bytes behind it, net/core/skbuff.c:
		// skb_vlan_untag). Checked here: 18- and 19-byte tagged frames
		// show in w1's rx_packets and never reach a packet socket. So
		// tagged frames are 20 bytes or more.
		k := "vlan-tagged"
		for k == "vlan-tagged" {
			k = garbleKinds[g.IntN(len(garbleKinds))]
		}
		// The untagged frame is built 4 bytes in, so its EtherType and
		// payload already sit behind the tag's place.
		inner := g.body(k, buf[4:], max-4)
		for len(inner) < 16 {
			inner = g.body(k, buf[4:], max-4)
		}
		f = buf[:len(inner)+4]
		binary.BigEndian.PutUint16(f[12:], 0x8100)
		binary.BigEndian.PutUint16(f[14:], uint16(g.rng.Uint32()))
	} else {
		f = g.body(kind, buf, max)
	}
	copy(f[0:6], g.dst[g.IntN(2)])
	copy(f[6:12], g.src)
	g.counts[kind]++
	return f
}

// body builds a frame of the given kind (MACs left for Frame to fill) of
// at most max bytes in buf.
func (g *Garbler) body(kind string, buf []byte, max int) []byte {
	switch kind {
	case "random":
		f := buf[:14+g.IntN(max-14+1)]
		g.fill(f)
		// No VLAN TPIDs (see Frame) and no ARP, which could poison the
		// lab's neighbour table if a random one happened to parse.
		for et := binary.BigEndian.Uint16(f[12:]); et == 0x8100 || et == 0x88a8 || et == 0x0806; et = binary.BigEndian.Uint16(f[12:]) {
			binary.BigEndian.PutUint16(f[12:], uint16(g.rng.Uint32()))
		}
		if binary.BigEndian.Uint16(f[12:]) == 0x0800 && len(f) >= 34 {
			copy(f[26:30], g.srcIP[:])
			copy(f[30:34], g.dstIP[:])
		}
		return f
	case "ipv6-garbled":
		n := 14 + g.IntN(max-14+1)
		f := buf[:n]
		g.fill(f)
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		if n >= 15 {
			f[14] = 0x60 | f[14]&0x0f
		}
		if n >= 54 {
			// link-local source and destination
			copy(f[22:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0})
			copy(f[38:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0})
		}
		return f
	case "tiny":
		f := buf[:14+g.IntN(7)]
		g.fill(f)
		binary.BigEndian.PutUint16(f[12:], []uint16{0x0800, 0x86dd, 0x0800, 0x88cc}[g.IntN(4)])
		return f
	case "zero-ethertype":
		f := buf[:14+g.IntN(max-14+1)]
		g.fill(f)
		binary.BigEndian.PutUint16(f[12:], uint16(g.IntN(0x600)))
		return f
	}
	return g.ipBody(kind, buf, max)
}

// ipBody builds the IPv4 kinds of body.
func (g *Garbler) ipBody(kind string, buf []byte, max int) []byte {
	switch kind {
	case "ip-truncated":
		return g.ipFrame(buf, 14+g.IntN(20), 5)
	case "ip-bad-ihl":
		n := 14 + 20 + g.IntN(max-34+1)
		ihl := g.IntN(5) // 0..4
		if g.IntN(2) == 0 && n < 14+60 {
			ihl = (n-14)/4 + 1 + g.IntN(16)
			ihl = min(ihl, 15)
		}
		f := g.ipFrame(buf, n, ihl)
		setTotLen(f, n-14)
		return f
	case "ip-len-long":
		n := 14 + 20 + g.IntN(max-34+1)
		f := g.ipFrame(buf, n, 5)
		setTotLen(f, n-14+1+g.IntN(65535-(n-14)))
		ipCsum(f, 5)
		return f
	case "ip-len-short":
		n := 14 + 20 + g.IntN(max-34+1)
		f := g.ipFrame(buf, n, 5)
		setTotLen(f, g.IntN(n-14))
		ipCsum(f, 5)
		return f
	case "l4-truncated":
		return g.l4Truncated(buf, max)
	case "ip-fragment":
		n := 14 + 20 + g.IntN(max-34+1)
		f := g.ipFrame(buf, n, 5)
		setTotLen(f, n-14)
		f[23] = []byte{6, 17, 1}[g.IntN(3)]
		if g.IntN(2) == 0 {
			ipCsum(f, 5)
		}
		return f
	case "max-size":
		f := g.ipFrame(buf, max, 5)
		setTotLen(f, max-14)
		f[20], f[21] = 0x40, 0 // DF
		f[23] = 6
		ipCsum(f, 5)
		return f
	case "ip-options":
		ihl := 6 + g.IntN(10)
		n := min(max, 14+ihl*4+g.IntN(64))
		f := g.ipFrame(buf, n, ihl)
		setTotLen(f, n-14)
		f[20], f[21] = 0, 0
		// an option whose length runs past the header, then junk
		f[34] = []byte{7, 68, 131, 137, 148}[g.IntN(5)] // RR, TS, LSRR, SSRR, RA
		f[35] = byte(4 + g.IntN(252))
		ipCsum(f, ihl)
		return f
	}
	panic("unknown kind " + kind)
}

// l4Truncated is a valid IPv4 header with a TCP, UDP, ICMP or other L4
// header cut short.
func (g *Garbler) l4Truncated(buf []byte, max int) []byte {
	ihl := 5 + g.IntN(2)*g.IntN(11)
	proto := []byte{6, 17, 1, 6, 17, 132, 47, byte(g.rng.Uint32())}[g.IntN(8)]
	l4max := map[byte]int{6: 20, 17: 8, 1: 8}[proto]
	if l4max == 0 {
		l4max = 12
	}
	n := min(max, 14+ihl*4+g.IntN(l4max))
	f := g.ipFrame(buf, n, ihl)
	for i := 34; i < 14+ihl*4 && i < n; i++ {
		f[i] = 1 // NOP options
	}
	f[15], f[20], f[21] = 0, 0, 0 // TOS, no fragment
	f[23] = proto
	setTotLen(f, n-14)
	ipCsum(f, ihl)
	return f
}

// ipFrame is n random bytes in buf with the IPv4 EtherType, version 4 and
// the given IHL, and TTL and the bed's addresses where they fit.
func (g *Garbler) ipFrame(buf []byte, n, ihl int) []byte {
	f := buf[:n]
	g.fill(f)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	if n >= 15 {
		f[14] = 0x40 | byte(ihl&0x0f)
	}
	if n >= 34 {
		f[22] = 64 // TTL
		copy(f[26:30], g.srcIP[:])
		copy(f[30:34], g.dstIP[:])
	}
	return f
}

// setTotLen sets the IPv4 total length of frame f, where it fits.
func setTotLen(f []byte, v int) {
	if len(f) >= 18 {
		binary.BigEndian.PutUint16(f[16:], uint16(v))
	}
}

// ipCsum sets a correct IPv4 header checksum for an ihl-word header, where
// the header fits in f.
func ipCsum(f []byte, ihl int) {
	if len(f) >= 14+ihl*4 && ihl >= 5 {
		f[24], f[25] = 0, 0
		binary.BigEndian.PutUint16(f[24:], testbed.Checksum(f[14:14+ihl*4]))
	}
}
