package tap

import "golang.org/x/sys/unix"

// Queue is one queue of a TAP: batch reads and writes of frames, each
// preceded by a virtio_net_hdr when the TAP has IFF_VNET_HDR. A TUN fd has
// only read and write (drivers/net/tun.c: no mmsg, and MSG_MORE batching is
// vhost-net's alone), so a batch is one syscall per frame; what batching
// buys here is draining until EAGAIN and fewer wake-ups.
//
// Errors are errno values: EAGAIN (nothing queued, or no room), EIO (a write
// while the TAP is down), EBADFD (the TAP was deleted: the queue is
// detached, tun.c: tun_get on a file without a tun), and EINVAL or ENOBUFS
// for a frame the TAP refused.
type Queue struct{ fd int }

// NewQueueFd wraps fd, a non-blocking descriptor that speaks one frame per
// read and write (a socketpair standing in for a TAP in tests, say). The
// caller keeps ownership of fd.
func NewQueueFd(fd int) *Queue { return &Queue{fd: fd} }

// Fd is the queue's descriptor, for polling.
func (q *Queue) Fd() int { return q.fd }

// Duplex says that Read and Write may run at once on two threads
// (forward.Duplex): each is one system call on the queue's fd, and they
// share nothing in user space.
func (q *Queue) Duplex() {}

// Read reads up to len(bufs) frames, one read each, into bufs[i][offset:]
// and sets sizes[i]; it stops at the first EAGAIN and returns how many it
// read. A read that fills its buffer may have been cut short (a TUN read
// returns min(frame, buffer) and says nothing), so give each buffer at
// least one byte more than the largest frame to accept. It handles all n
// frames before reporting an error other than EAGAIN.
func (q *Queue) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	for n < len(bufs) && n < len(sizes) {
		k, err := unix.Read(q.fd, bufs[n][offset:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if n > 0 && err == unix.EAGAIN {
				err = nil
			}
			return n, err
		}
		sizes[n] = k
		n++
	}
	return n, nil
}

// Write writes bufs[i][offset:], one write each, and returns how many the
// TAP took; a short count n comes with the error of bufs[n].
func (q *Queue) Write(bufs [][]byte, offset int) (int, error) {
	for i := 0; i < len(bufs); i++ {
		_, err := unix.Write(q.fd, bufs[i][offset:])
		if err == unix.EINTR {
			i--
			continue
		}
		if err != nil {
			return i, err
		}
	}
	return len(bufs), nil
}

// Queues returns the TAP's queues, one per fd, in order. They share the
// fds with the Device, which still owns them.
func (d *Device) Queues() []*Queue {
	qs := make([]*Queue, len(d.fds))
	for i, fd := range d.fds {
		qs[i] = &Queue{fd: fd}
	}
	return qs
}
