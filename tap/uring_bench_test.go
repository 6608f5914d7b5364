package tap_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/internal/base/procfs"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// The benchmarks of batched TAP I/O: a write() or read() per frame
// (Queue, "syscall") against one io_uring_enter per batch (URingQueue,
// "uring"), on a real TAP with IFF_NAPI and a vnet header in a lab
// namespace. Each case alternates the two in ten rounds within one run,
// so a machine busy with other work weighs on both alike; -count N gives
// N such runs. Per frame and per variant each case reports ns (wall),
// cpu-ns (this thread's CPU time, which includes the softirq work the
// kernel runs in it: the TAP's NAPI poll and the lab's receive path on
// local_bh_enable) and sirq-ns (the whole machine's softirq time, from
// /proc/stat ticks), and cpu-ratio, uring's cpu-ns over syscall's. ns/op
// means nothing here.
//
//	go test -run '^$' -bench 'BenchmarkTAP(Write|Read)$' -count 6 ./tap/

// variants opens both endpoints on fd, the forwarder's two ways to do a
// TAP queue's I/O; the rings close when b ends.
func variants(b *testing.B, fd int) [2]forward.Endpoint {
	q, err := tap.NewURingQueue(fd, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return [2]forward.Endpoint{tap.NewQueueFd(fd), q}
}

var variantNames = [2]string{"syscall", "uring"}

// tally is what one variant's rounds measured.
type tally struct {
	wall   time.Duration
	cpu    int64
	sirq   time.Duration
	frames int
}

func softIRQ(b *testing.B) time.Duration {
	t, err := procfs.ReadCPUTimes()
	if err != nil {
		b.Fatal(err)
	}
	return t.SoftIRQ
}

func report(b *testing.B, t [2]tally) {
	b.StopTimer()
	for v, t := range t {
		f := float64(max(t.frames, 1))
		b.ReportMetric(float64(t.wall.Nanoseconds())/f, variantNames[v]+"-ns/frame")
		b.ReportMetric(float64(t.cpu)/f, variantNames[v]+"-cpu-ns/frame")
		b.ReportMetric(float64(t.sirq.Nanoseconds())/f, variantNames[v]+"-sirq-ns/frame")
	}
	b.ReportMetric((float64(t[1].cpu)/float64(t[1].frames))/(float64(t[0].cpu)/float64(t[0].frames)), "cpu-ratio")
}

// rounds is how many times a case alternates the variants.
const rounds = 10

var frameSizes = []struct {
	name  string
	ipLen int
	gso   bool
}{{"mtu", 1500, false}, {"gso64k", 65000, true}}

// BenchmarkTAPWrite writes batches of 1, 8 and 64 frames, MTU-sized or
// 64 KiB USO super-frames, to the lab's UDP port 9, where nothing listens:
// each frame goes through tun_get_user, the TAP's NAPI (GRO) and the lab's
// ip_rcv and udp_rcv, and is dropped there.
func BenchmarkTAPWrite(b *testing.B) {
	bed, d := labTAP(b)
	src, dst := bed.WireAddr.Addr(), bed.LabAddr.Addr()
	for _, size := range frameSizes {
		frame := udpFrame(d.MAC(), src, dst, 9, 0, size.ipLen, size.gso)
		for _, batch := range []int{1, 8, 64} {
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = append([]byte(nil), frame...)
			}
			b.Run(fmt.Sprintf("%s/batch=%d", size.name, batch), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				qs := variants(b, d.Fds()[0])
				var t [2]tally
				n := (b.N + rounds - 1) / rounds
				b.ResetTimer()
				for range rounds {
					for v, q := range qs {
						s, c, w := softIRQ(b), threadCPU(), time.Now()
						for range n {
							if k, err := q.Write(bufs, 0); k != batch || err != nil {
								b.Fatalf("%s wrote %d of %d: %v", variantNames[v], k, batch, err)
							}
						}
						t[v].wall += time.Since(w)
						t[v].cpu += threadCPU() - c
						t[v].sirq += softIRQ(b) - s
						t[v].frames += n * batch
					}
				}
				report(b, t)
			})
		}
	}
}

// BenchmarkTAPRead reads what the lab sent into the TAP, 1, 8 or 64
// frames queued per read of up to 64 (the forwarder's batch): the
// forwarder's case after a wake-up. The lab's sends are not timed.
func BenchmarkTAPRead(b *testing.B) {
	bed, d := labTAP(b)
	send, sa := labSender(b, bed, d)
	src, dst := bed.LabAddr.Addr(), bed.WireAddr.Addr()
	bufs, lens := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, vnethdr.Len+65536)
	}
	clock := cpuClockCost()
	for _, size := range frameSizes {
		frame := udpFrame(net.HardwareAddr{0x02, 0, 0x5e, 0, 0, 2}, src, dst, 9, 0, size.ipLen, size.gso)
		for _, queued := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/queued=%d", size.name, queued), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				qs := variants(b, d.Fds()[0])
				for k, _ := qs[0].Read(bufs, lens, 0); k > 0; k, _ = qs[0].Read(bufs, lens, 0) {
				}
				var t [2]tally
				n := (b.N + rounds - 1) / rounds
				b.ResetTimer()
				for range rounds {
					for v, q := range qs {
						s := softIRQ(b)
						for range n {
							for range queued {
								if err := unix.Sendto(send, frame, 0, sa); err != nil {
									b.Fatalf("sending into the TAP: %v", err)
								}
							}
							c, w := threadCPU(), time.Now()
							k, err := q.Read(bufs, lens, 0)
							t[v].wall += time.Since(w)
							t[v].cpu += threadCPU() - c - clock
							if err != nil || k < queued {
								b.Fatalf("%s read %d of %d: %v", variantNames[v], k, queued, err)
							}
							t[v].frames += k
						}
						t[v].sirq += softIRQ(b) - s
					}
				}
				report(b, t)
			})
		}
	}
}

// labTAP opens a single-queue TAP with IFF_NAPI and a vnet header in the
// lab namespace of a fresh bed, up, with the bed's lab address.
func labTAP(tb testing.TB) (*testbed.Bed, *tap.Device) {
	bed := testbed.NewForTest(tb, testbed.Config{Mode: testbed.Forwarder})
	var d *tap.Device
	err := bed.Do(bed.LabNS, func() error {
		var err error
		d, err = tap.Open(tap.Config{Name: bed.LabIf, NAPI: tap.On, VnetHdr: tap.On, Addr: bed.LabAddr})
		return err
	})
	if err != nil {
		tb.Fatalf("opening TAP %s in %s: %v", bed.LabIf, bed.LabNS, err)
	}
	tb.Cleanup(func() { d.Close() })
	return bed, d
}

// udpFrame is a vnet header and an Ethernet frame with an IPv4/UDP packet
// of ipLen bytes from src to dst's port, its payload starting with seq.
// With gso it is a USO super-frame of 1472-byte datagrams with a partial
// checksum; else its UDP checksum is 0 (none).
func udpFrame(dstMAC net.HardwareAddr, src, dst netip.Addr, port uint16, seq byte, ipLen int, gso bool) []byte {
	b := make([]byte, vnethdr.Len+14+ipLen)
	h := vnethdr.Hdr{}
	if gso {
		h = vnethdr.Hdr{Flags: vnethdr.FlagNeedsCsum, GSOType: vnethdr.GSOUDPL4, HdrLen: 42, GSOSize: 1472, CsumStart: 34, CsumOffset: 6}
	}
	h.Encode(b)
	f := b[vnethdr.Len:]
	copy(f, dstMAC)
	copy(f[6:], []byte{0x02, 0, 0x5e, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	s4, d4 := src.As4(), dst.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(ipLen-20))
	udp[8] = seq
	return b
}

func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// labSender is a packet socket in the lab namespace bound to the TAP, with
// a vnet header: what it sends the TAP queues for reading.
func labSender(b testing.TB, bed *testbed.Bed, d *tap.Device) (int, *unix.SockaddrLinklayer) {
	var fd int
	var sa unix.SockaddrLinklayer
	err := bed.Do(bed.LabNS, func() error {
		ifi, err := net.InterfaceByName(d.Name())
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		sa = unix.SockaddrLinklayer{Protocol: 0x0008, Ifindex: ifi.Index} // htons(ETH_P_IP)
		return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1)
	})
	if err != nil {
		b.Fatalf("packet socket on %s: %v", d.Name(), err)
	}
	b.Cleanup(func() { unix.Close(fd) })
	return fd, &sa
}

// cpuClockCost is the thread CPU time two back-to-back threadCPU calls
// measure: what each timed Read below carries on top of its own.
func cpuClockCost() int64 {
	best := int64(1 << 62)
	for range 1000 {
		c := threadCPU()
		best = min(best, threadCPU()-c)
	}
	return best
}
