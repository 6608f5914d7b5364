package cost

import (
	"runtime"
	"time"
)

// CopyBytes is the buffer CopyBandwidth copies through: larger than a
// core's caches of the kind the bench runs on, so that its figure is the
// memory copy a forwarder makes of frames it has not just touched.
const CopyBytes = 32 << 20

// copyBlock is what one copy moves: a 64 KiB GSO frame.
const copyBlock = 64 << 10

// CopyBandwidth is how many bytes per second one thread copies here, in
// frame-sized blocks through a buffer of CopyBytes, measured for d on
// the calling thread (locked to it): the price of a copy per byte that
// the floor of a userspace forwarder is made of (Floor).
func CopyBandwidth(d time.Duration) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src, dst := make([]byte, CopyBytes), make([]byte, CopyBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	var n int64
	start := time.Now()
	for time.Since(start) < d {
		for off := 0; off < CopyBytes; off += copyBlock {
			n += int64(copy(dst[off:off+copyBlock], src[off:off+copyBlock]))
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// Floor is the CPU seconds per gigabit a userspace forwarder between a
// TAP and a packet socket on a veth cannot go below: every AF_PACKET and
// TAP path copies each byte once on its way in and once on its way out,
// at bandwidth bytes per second (CopyBandwidth). System calls, headers
// and wake-ups come on top.
func Floor(bandwidth float64) float64 {
	if bandwidth <= 0 {
		return 0
	}
	return 2 * 1e9 / 8 / bandwidth
}
