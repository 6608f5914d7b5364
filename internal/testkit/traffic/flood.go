package traffic

import (
	"encoding/binary"
	"maps"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// UDPFrames builds n IPv4/UDP frames from bed's wire to port on its lab,
// each with its own source port and payload bytes of payload, with valid
// IP and UDP checksums, from Ethernet address src to dst.
func UDPFrames(bed *testbed.Bed, src, dst net.HardwareAddr, port, payload, n int) [][]byte {
	out := make([][]byte, n)
	sip, dip := bed.WireAddr.Addr().As4(), bed.LabAddr.Addr().As4()
	for i := range out {
		f := make([]byte, 14+20+8+payload)
		copy(f[0:], dst)
		copy(f[6:], src)
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		ip := f[14:34]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
		binary.BigEndian.PutUint16(ip[4:], uint16(i))
		ip[8], ip[9] = 64, 17
		copy(ip[12:], sip[:])
		copy(ip[16:], dip[:])
		binary.BigEndian.PutUint16(ip[10:], testbed.Checksum(ip))
		udp := f[34:]
		binary.BigEndian.PutUint16(udp[0:], uint16(10000+i))
		binary.BigEndian.PutUint16(udp[2:], uint16(port))
		binary.BigEndian.PutUint16(udp[4:], uint16(8+payload))
		for j := 8; j < len(udp); j++ {
			udp[j] = byte(i + j)
		}
		// pseudo-header: addresses, protocol, length (RFC 768)
		ph := make([]byte, 0, 12+len(udp))
		ph = append(ph, sip[:]...)
		ph = append(ph, dip[:]...)
		ph = append(ph, 0, 17, byte(len(udp)>>8), byte(len(udp)))
		ph = append(ph, udp...)
		c := testbed.Checksum(ph)
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(udp[6:], c)
		out[i] = f
	}
	return out
}

// Flood writes frames to packet sockets, from one goroutine per socket,
// as fast as they take them, until End.
type Flood struct {
	stop         chan struct{}
	once         sync.Once
	wg           sync.WaitGroup
	attempts, ok atomic.Uint64
	mu           sync.Mutex
	errs         map[string]uint64
}

// StartFlood starts writing frames, round robin, to each of fds.
func StartFlood(fds []int, frames [][]byte) *Flood {
	fl := &Flood{stop: make(chan struct{}), errs: map[string]uint64{}}
	for k, fd := range fds {
		fl.wg.Go(func() { fl.send(k, fd, frames) })
	}
	return fl
}

func (fl *Flood) send(k, fd int, frames [][]byte) {
	var attempts, ok uint64
	errs := map[string]uint64{}
	defer func() {
		fl.attempts.Add(attempts)
		fl.ok.Add(ok)
		fl.mu.Lock()
		for e, n := range errs {
			fl.errs[e] += n
		}
		fl.mu.Unlock()
	}()
	for i := k; ; i++ {
		if i%256 == 0 {
			select {
			case <-fl.stop:
				return
			default:
			}
		}
		attempts++
		if _, err := unix.Write(fd, frames[i%len(frames)]); err != nil {
			errs[err.Error()]++
			continue
		}
		ok++
	}
}

// End stops the senders and waits for them; it may be called again.
func (fl *Flood) End() {
	fl.once.Do(func() { close(fl.stop) })
	fl.wg.Wait()
}

// Stats are the writes tried, those the sockets took, and the errors of
// the others by message; complete after End.
func (fl *Flood) Stats() (attempts, ok uint64, errs map[string]uint64) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.attempts.Load(), fl.ok.Load(), maps.Clone(fl.errs)
}
