package forward

import (
	"time"

	"golang.org/x/sys/unix"
)

// gather waits, within the GRO window, for more frames from the NIC
// behind the n of a batch that one Read found, while the batch's last
// frame for the TAP leaves its flow open, and accepts them as they come:
// so segments of a flow that arrive a little apart (a worker faster than
// the wire) still merge into one TAP write. It returns the batch's frames
// now, and an error only when the NIC is gone. A stop ends the wait; the
// loop sees it next.
func (q *QueueWorker) gather(n int) (int, error) {
	deadline := time.Now().Add(q.groWindow)
	for n < q.batch && q.lastOpen() {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		ts := unix.NsecToTimespec(int64(left))
		p := [2]unix.PollFd{q.w.pfd[0], {Fd: int32(q.nic.Fd()), Events: unix.POLLIN}}
		if q.w.wait(p[:], &ts) != nil || p[0].Revents != 0 || p[1].Revents == 0 {
			break
		}
		m, err := q.nic.Read(q.nicBufs[n:], q.nicSizes[n:], headroom-hdrLen)
		err = q.fromNIC.received(m, err, &q.tally)
		for j := 0; j < m; j++ {
			q.acceptFromNIC(n+j, j)
		}
		if n += m; err != nil || m == 0 {
			return n, err
		}
	}
	return n, nil
}

// lastOpen says whether the last frame queued for the TAP could take the
// next segment of its flow.
func (q *QueueWorker) lastOpen() bool {
	k := len(q.frames) - 1
	if k < 0 || q.tunnel[k] {
		return false
	}
	f := &q.frames[k]
	return q.gro.Open(&f.Hdr, f.Buf[f.Start:f.End])
}
