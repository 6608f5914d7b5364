package forward

import "golang.org/x/sys/unix"

// Endpoint is one queue of one side: a TAP queue (tap.Queue) or a packet
// socket (afpacket.Socket). Frames are read and written in batches, each frame
// preceded by the side's virtio-net header when it has one. A worker owns
// its endpoints: Read and Write are called from one goroutine.
type Endpoint interface {
	// Read fills bufs[i][offset:] with up to len(bufs) frames and sets
	// sizes[i] to each one's length; it returns how many it filled and
	// handles all of them before reporting an error. A size larger than
	// len(bufs[i])-offset means the frame did not fit its buffer.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write hands bufs[i][offset:] to the device in order and returns how
	// many it took. When it took none, err says why bufs[0] failed; a short
	// count with a nil error means bufs[n] failed and writing again from
	// there reports why.
	Write(bufs [][]byte, offset int) (n int, err error)
	// Fd is polled for readability (and writability after EAGAIN).
	Fd() int
}

// NIC is the wire side: an Endpoint plus what the kernel says about each
// frame it received besides the frame itself.
type NIC interface {
	Endpoint
	// VLAN returns the 802.1Q/802.1ad tag the kernel stripped from frame i
	// of the last Read, if it stripped one.
	VLAN(i int) (tpid, tci uint16, ok bool)
}

// KernelCounters is implemented by a NIC whose kernel side drops frames
// before the worker sees them (afpacket.Socket: PACKET_STATISTICS).
type KernelCounters interface {
	Stats() (packets, drops uint64, err error)
}

// The errors endpoints return are errno values, which the workers read as:
//
//	EAGAIN            nothing to read, or no room to write: wait
//	EINTR             try again
//	ENETDOWN, EIO     the device is down (NIC read, TAP write): wait for it
//	ENODEV, EBADFD    the device is gone: the worker ends
//	anything else     that one frame failed: count it and go on
func gone(err error) bool { return err == unix.ENODEV || err == unix.EBADFD }
