package forward

import (
	"bytes"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vnethdr"
)

// nicToTAP moves one batch from the packet socket to the TAP and returns
// how many frames the socket gave. Only errors that end the worker are
// returned; everything else is counted.
func (q *Queue) nicToTAP() (int, error) {
	n, err := q.sock.Recv(q.nicBufs, headroom-hdrLen, q.nicMeta)
	if err != nil {
		switch err {
		case unix.EAGAIN, unix.EINTR:
			return 0, nil
		case unix.EINVAL:
			// The frame was consumed: its GSO type has no vnet header
			// form (af_packet.c: packet_rcv_vnet).
			q.C.NICToTAP.Rx.Packets.Add(1)
			q.C.NICToTAP.Drops[DropNICRecv].Add(1)
			return 1, nil
		case unix.ENETDOWN:
			return 0, q.nicWentDown()
		}
		q.C.NICToTAP.Errors.Add(1)
		return 0, nil
	}
	if n > 0 && q.fw != nil && q.fw.nicDown.Load() {
		q.linkUp(&q.fw.nicDown, "NIC")
	}
	t := &q.tally
	for i := 0; i < n; i++ {
		m := &q.nicMeta[i]
		buf := q.nicBufs[i]
		// Every frame counts as received, so that received = transmitted
		// + merged + drops holds for whatever happens to it next.
		t.rxPkts++
		if size := m.Len - hdrLen; size > 0 {
			t.rxBytes += uint64(size)
			if m.VLAN {
				t.rxBytes += 4 // the tag the kernel stripped
			}
		}
		if m.Truncated {
			t.drop(DropOversize)
			continue
		}
		if m.Len < hdrLen+14 {
			t.drop(DropBadHdr)
			continue
		}
		var h vnethdr.Hdr
		if h.Decode(buf[headroom-hdrLen:]) != nil {
			t.drop(DropBadHdr)
			continue
		}
		start, end := headroom, headroom-hdrLen+m.Len
		if m.VLAN {
			var err error
			if start, err = vnethdr.InsertVLAN(buf, start, end-start, m.TPID, m.TCI, &h); err != nil {
				t.drop(DropBadHdr)
				continue
			}
		}
		frame := buf[start:end]
		if vnethdr.Fixup(&h, frame) != nil {
			t.drop(DropBadHdr)
			continue
		}
		if h.IsGSO() {
			t.gso++
		}
		q.frames = append(q.frames, vnethdr.Frame{Buf: buf, Start: start, End: end, Hdr: h})
	}
	if q.gro != nil && len(q.frames) > 1 {
		// Userspace GRO: consecutive segments of a flow become one GSO
		// frame, one TAP write instead of many.
		t.merged += uint64(q.gro.Coalesce(q.frames))
	}
	for i := range q.frames {
		f := &q.frames[i]
		if f.Merged {
			continue
		}
		if err := q.writeTAP(f.Hdr, f.Buf, f.Start, f.End, f.Hdr.IsGSO()); err != nil {
			q.frames = q.frames[:0]
			return n, err
		}
	}
	q.frames = q.frames[:0]
	t.publish(&q.C.NICToTAP, &q.C, n)
	return n, nil
}

// writeTAP writes frame buf[start:end] to the TAP, whose vnet header h
// describes; it segments and completes checksums when the TAP has no vnet
// header.
func (q *Queue) writeTAP(h vnethdr.Hdr, buf []byte, start, end int, gso bool) error {
	t := &q.tally
	if q.tapVnet {
		h.Encode(buf[start-hdrLen:])
		return q.tapWrite(buf[start-hdrLen:end], end-start)
	}
	frame := buf[start:end]
	if !gso {
		if vnethdr.CompleteChecksum(&h, frame) != nil {
			t.drop(DropBadHdr)
			return nil
		}
		return q.tapWrite(frame, len(frame))
	}
	k, err := vnethdr.Segment(h, frame, q.segBufs, q.segSizes)
	if err != nil {
		t.drop(DropSegment)
		return nil
	}
	t.segs += uint64(k)
	for j := 0; j < k; j++ {
		if err := q.tapWrite(q.segBufs[j][:q.segSizes[j]], q.segSizes[j]); err != nil {
			return err
		}
	}
	return nil
}

// tapWrite writes one frame (with its vnet header when the TAP has one);
// size is the Ethernet frame length counted as transmitted.
func (q *Queue) tapWrite(b []byte, size int) error {
	t := &q.tally
	for {
		_, err := unix.Write(q.tapFd, b)
		switch err {
		case nil:
			t.txPkts++
			t.txBytes += uint64(size)
			if q.fw != nil && q.fw.tapDown.Load() {
				q.linkUp(&q.fw.tapDown, "TAP")
			}
			return nil
		case unix.EINTR:
			continue
		case unix.EBADFD:
			// drivers/net/tun.c: tun_get_user on a detached queue (the
			// netdev was deleted).
			return ErrTAPGone
		}
		// EIO while the TAP is down, EAGAIN/ENOBUFS under pressure,
		// EINVAL for a frame the TAP refuses: not fatal.
		t.drop(DropTAPWrite)
		if err == unix.EIO && q.fw != nil && q.fw.tapDown.CompareAndSwap(false, true) {
			q.fw.log.Warn("TAP is down: frames from the NIC are dropped (tap_write) until it is up")
		}
		return nil
	}
}

// tapToNIC drains up to a batch of frames from the TAP and sends them with
// one sendmmsg. It returns how many frames were read.
func (q *Queue) tapToNIC() (int, error) {
	t := &q.tally
	k := 0
	read := 0
	for read < q.batch {
		buf := q.tapBufs[k]
		var n int
		var err error
		if q.tapVnet {
			n, err = unix.Read(q.tapFd, buf[headroom-hdrLen:])
			n -= hdrLen
		} else {
			n, err = unix.Read(q.tapFd, buf[headroom:])
		}
		if err != nil {
			if err == unix.EAGAIN {
				break
			}
			if err == unix.EINTR {
				continue
			}
			if err == unix.EBADFD {
				return read, ErrTAPGone
			}
			t.errors++
			break
		}
		read++
		t.rxPkts++
		if n > 0 {
			t.rxBytes += uint64(n)
		}
		if n < 14 {
			t.drop(DropBadHdr)
			continue
		}
		frame := buf[headroom : headroom+n]
		if q.strict && !bytes.Equal(frame[6:12], q.mac[:]) {
			t.drop(DropSpoofed)
			continue
		}
		var h vnethdr.Hdr
		if q.tapVnet {
			// The TAP's writer (a guest, a lab program) is not trusted.
			if h.Decode(buf[headroom-hdrLen:]) != nil || vnethdr.Fixup(&h, frame) != nil {
				t.drop(DropBadHdr)
				continue
			}
			if h.IsGSO() {
				t.gso++
			}
		}
		h.Encode(buf[headroom-hdrLen:])
		q.txFrames[k] = buf[headroom-hdrLen : headroom+n]
		k++
	}
	q.send(q.txFrames[:k])
	t.publish(&q.C.TAPToNIC, &q.C, read)
	return read, nil
}

// send hands frames to the socket, skipping (and counting) any it refuses.
func (q *Queue) send(frames [][]byte) {
	t := &q.tally
	waited := false
	for len(frames) > 0 {
		n, err := q.sock.Send(frames)
		for _, f := range frames[:n] {
			t.txPkts++
			t.txBytes += uint64(len(f) - hdrLen)
		}
		frames = frames[n:]
		if err == nil || len(frames) == 0 {
			continue
		}
		switch err {
		case unix.EINTR:
		case unix.EAGAIN:
			// The socket's send buffer is full: wait for room once per
			// batch, then drop what still does not fit.
			if !waited && q.waitWritable() {
				waited = true
				continue
			}
			t.drops[DropNICBusy] += uint64(len(frames))
			return
		case unix.ENOBUFS:
			t.drop(DropNICBusy)
			frames = frames[1:]
		case unix.ENETDOWN, unix.ENXIO:
			t.drops[DropNICRefused] += uint64(len(frames))
			return
		default:
			t.drop(DropNICRefused)
			frames = frames[1:]
		}
	}
}

func (q *Queue) waitWritable() bool {
	p := [2]unix.PollFd{
		{Fd: q.pfd[0].Fd, Events: unix.POLLIN},
		{Fd: int32(q.sock.Fd()), Events: unix.POLLOUT},
	}
	ts := unix.NsecToTimespec(int64(10 * time.Millisecond))
	n, err := unix.Ppoll(p[:], &ts, nil)
	return err == nil && n > 0 && p[1].Revents&unix.POLLOUT != 0
}
