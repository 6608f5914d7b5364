package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Meta describes one received frame.
type Meta struct {
	Len       int    // bytes written, vnet header included
	VLAN      bool   // the kernel stripped an 802.1Q/802.1ad tag
	TPID, TCI uint16 // the stripped tag
	Truncated bool   // the frame did not fit its buffer
}

// sizeofAuxdata is sizeof(struct tpacket_auxdata).
const sizeofAuxdata = int(unsafe.Sizeof(unix.TpacketAuxdata{}))

var auxSpace = unix.CmsgSpace(sizeofAuxdata)

// mmsg holds the msghdr/iovec arrays of one direction, allocated once.
type mmsg struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	ctrl []byte
}

func (m *mmsg) init(n int, rx bool) {
	m.hdrs = make([]unix.Mmsghdr, n)
	m.iovs = make([]unix.Iovec, n)
	if rx {
		m.ctrl = make([]byte, n*auxSpace)
	}
	for i := range m.hdrs {
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.Iovlen = 1
	}
}

// Recv receives up to len(bufs) frames with one recvmmsg(MSG_DONTWAIT):
// frame i, its vnet header in front, lands in bufs[i][offset:] and
// meta[i] describes it. With nothing queued it returns unix.EAGAIN. An
// error other than EAGAIN consumed one frame (EINVAL: a GSO type the vnet
// header cannot express, net/packet/af_packet.c: packet_rcv_vnet).
func (s *Socket) Recv(bufs [][]byte, offset int, meta []Meta) (int, error) {
	n := min(len(bufs), len(meta), len(s.rx.hdrs))
	if n == 0 {
		return 0, nil
	}
	for i := 0; i < n; i++ {
		b := bufs[i][offset:]
		s.rx.iovs[i].Base = &b[0]
		s.rx.iovs[i].SetLen(len(b))
		h := &s.rx.hdrs[i].Hdr
		h.Control = &s.rx.ctrl[i*auxSpace]
		h.SetControllen(auxSpace)
		h.Flags = 0
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.rx.hdrs[0])),
		uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	got := int(r)
	for i := 0; i < got; i++ {
		mh := &s.rx.hdrs[i]
		m := &meta[i]
		*m = Meta{Len: int(mh.Len), Truncated: mh.Hdr.Flags&unix.MSG_TRUNC != 0}
		if m.Len > len(bufs[i])-offset {
			m.Len = len(bufs[i]) - offset
			m.Truncated = true
		}
		parseAux(s.rx.ctrl[i*auxSpace:i*auxSpace+int(mh.Hdr.Controllen)], m)
	}
	return got, nil
}

// parseAux reads the VLAN tag from a PACKET_AUXDATA control message
// without allocating.
func parseAux(c []byte, m *Meta) {
	const hl = unix.SizeofCmsghdr
	for len(c) >= hl {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(h.Len)
		if l < hl || l > len(c) {
			return
		}
		if h.Level == unix.SOL_PACKET && h.Type == unix.PACKET_AUXDATA && l >= hl+sizeofAuxdata {
			a := (*unix.TpacketAuxdata)(unsafe.Pointer(&c[hl]))
			if a.Status&unix.TP_STATUS_VLAN_VALID != 0 {
				m.VLAN = true
				m.TCI = a.Vlan_tci
				m.TPID = 0x8100
				if a.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
					m.TPID = a.Vlan_tpid
				}
			}
			if a.Snaplen < a.Len {
				m.Truncated = true
			}
			return
		}
		sp := unix.CmsgSpace(l - hl)
		if sp > len(c) {
			return
		}
		c = c[sp:]
	}
}

// Send transmits frames (each a vnet header followed by an Ethernet frame)
// with one sendmmsg(MSG_DONTWAIT). It returns how many the kernel took. An
// error is that of frames[0]: EAGAIN or ENOBUFS (queue full; the qdisc is
// bypassed, so nothing queues), EINVAL or EMSGSIZE (the kernel refused that
// frame).
func (s *Socket) Send(frames [][]byte) (int, error) {
	n := min(len(frames), len(s.tx.hdrs))
	if n == 0 {
		return 0, nil
	}
	for i := 0; i < n; i++ {
		s.tx.iovs[i].Base = &frames[i][0]
		s.tx.iovs[i].SetLen(len(frames[i]))
	}
	r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.tx.hdrs[0])),
		uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	// A short count means frames[r] failed; sendmmsg reports only the
	// count, and the next call starting at that frame reports its error.
	return int(r), nil
}
