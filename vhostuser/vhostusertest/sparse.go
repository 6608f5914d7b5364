package vhostusertest

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrSentAway: the port closed the connection.
var ErrSentAway = errors.New("vhostusertest: the port closed the connection")

// SendAt transmits frames chains of size bytes, chain i a single
// descriptor at memory offset from+i*stride, a ring's worth at a time,
// waiting for the port to take each batch. Nothing writes those bytes:
// in a memory file larger than the rings and buffers (Config.MemSize)
// they are holes, which the port's reads fault in (issue 35: memory the
// front-end makes the port pay for). It returns how many the port took;
// ErrSentAway when it closed the connection instead. It uses every
// descriptor of the first pair's transmit ring: Send must not be used
// after it.
func (d *Driver) SendAt(from, stride, size, frames int) (int, error) {
	if from < 0 || stride < size || from+(frames-1)*stride+size > len(d.mem) {
		return 0, fmt.Errorf("vhostusertest: %d frames of %d bytes every %d from %d do not fit %d bytes of memory",
			frames, size, stride, from, len(d.mem))
	}
	taken := 0
	for taken < frames {
		n := min(d.num, frames-taken)
		for j := range n {
			d.PutDesc(TX, j, d.GPA(from+(taken+j)*stride), uint32(size), 0, 0)
			d.PushAvail(TX, uint16(j))
		}
		want := d.r[TX].availIdx
		for deadline := time.Now().Add(5 * time.Second); d.UsedIdx(TX) != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) || d.closed() {
				return taken + n - int(want-d.UsedIdx(TX)), ErrSentAway
			}
		}
		taken += n
	}
	return taken, nil
}

// closed says whether the port closed the connection.
func (d *Driver) closed() bool {
	if err := d.conn.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		return true
	}
	var b [1]byte
	_, err := d.conn.Read(b[:])
	return !errors.Is(err, os.ErrDeadlineExceeded)
}
