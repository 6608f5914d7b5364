package tap_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"testing"

	"github.com/tapfwd/tapfwd/internal/procfs"
	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
)

func csum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func tcpSeg(mac net.HardwareAddr, src, dst [4]byte, id uint16, seq uint32) []byte {
	const pay = 1448
	b := make([]byte, vnethdr.Len+14+20+20+pay)
	f := b[vnethdr.Len:]
	copy(f, mac)
	copy(f[6:], []byte{2, 0, 0x5e, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], 20+20+pay)
	binary.BigEndian.PutUint16(ip[4:], id)
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], csum(ip[:20], 0))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], 1)
	tcp[12] = 5 << 4
	tcp[13] = 0x10
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	for i := 20; i < 20+pay; i++ {
		tcp[i] = byte(i)
	}
	var ps uint32
	ps += uint32(binary.BigEndian.Uint16(src[0:])) + uint32(binary.BigEndian.Uint16(src[2:]))
	ps += uint32(binary.BigEndian.Uint16(dst[0:])) + uint32(binary.BigEndian.Uint16(dst[2:]))
	ps += 6 + 20 + pay
	binary.BigEndian.PutUint16(tcp[16:], csum(tcp, ps))
	return b
}

func TestExpNAPIMerges(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, threaded := range []bool{false, true} {
		bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
		var d *tap.Device
		err := bed.Do(bed.FwdNS, func() error {
			var err error
			d, err = tap.Open(tap.Config{Name: bed.LabIf, NAPI: tap.On, VnetHdr: tap.On, Netns: bed.LabNS, Addr: bed.LabAddr,
				NAPISettings: tap.NAPISettings{Threaded: threaded}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		q, err := tap.NewURingQueue(d.Fds()[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		eps := []struct {
			name string
			ep   endpoint
		}{{"syscall", tap.NewQueueFd(d.Fds()[0])}, {"uring", q}}
		seq := uint32(1000)
		id := uint16(0)
		for round := 0; round < 3; round++ {
			for _, e := range eps {
				bufs := make([][]byte, 64)
				for i := range bufs {
					bufs[i] = tcpSeg(d.MAC(), bed.WireAddr.Addr().As4(), bed.LabAddr.Addr().As4(), id, seq)
					id++
					seq += 1448
				}
				var r0, r1 procfs.Received
				bed.Do(bed.LabNS, func() error { r0, _ = procfs.ReadReceived(); return nil })
				const batches = 50
				for k := 0; k < batches; k++ {
					for i := range bufs {
						f := bufs[i][vnethdr.Len+14:]
						binary.BigEndian.PutUint16(f[4:], id)
						id++
						f[10], f[11] = 0, 0
						binary.BigEndian.PutUint16(f[10:], csum(f[:20], 0))
						tcp := f[20:]
						binary.BigEndian.PutUint32(tcp[4:], seq)
						seq += 1448
						tcp[16], tcp[17] = 0, 0
						var ps uint32
						s4, d4 := bed.WireAddr.Addr().As4(), bed.LabAddr.Addr().As4()
						ps += uint32(binary.BigEndian.Uint16(s4[0:])) + uint32(binary.BigEndian.Uint16(s4[2:]))
						ps += uint32(binary.BigEndian.Uint16(d4[0:])) + uint32(binary.BigEndian.Uint16(d4[2:]))
						ps += 6 + uint32(len(tcp))
						binary.BigEndian.PutUint16(tcp[16:], csum(tcp, ps))
					}
					if n, err := e.ep.Write(bufs, 0); n != 64 || err != nil {
						t.Fatal(n, err)
					}
				}
				bed.Do(bed.LabNS, func() error { r1, _ = procfs.ReadReceived(); return nil })
				got := r1.Sub(r0).IPPackets
				fmt.Printf("threaded=%v %s: %d frames written, lab Ip InReceives %d: %.1f frames per packet\n", threaded, e.name, 64*batches, got, float64(64*batches)/float64(got))
			}
		}
		q.Close()
		d.Close()
	}
}
