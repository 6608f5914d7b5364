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

	"github.com/tapfwd/tapfwd/internal/procfs"
	"github.com/tapfwd/tapfwd/internal/testbed"
	"github.com/tapfwd/tapfwd/tap"
	"github.com/tapfwd/tapfwd/vnethdr"
)

// The benchmarks of batched TAP I/O: write() or read() per frame (Queue)
// against one io_uring_enter per batch (URingQueue), on a real TAP with
// IFF_NAPI and a vnet header in a lab namespace. Sub-benchmarks of one
// case follow each other, so -count N interleaves the variants (A B A B).
// Besides ns/op (per batch) each reports, per frame: ns (wall), cpu-ns
// (this thread's CPU time, which includes the softirq work the kernel runs
// in it: NAPI polls and the lab's receive path on local_bh_enable) and
// sirq-ns (the whole machine's softirq time, from /proc/stat ticks).
//
//	go test -run '^$' -bench 'BenchmarkTAP(Write|Read)' -count 6 ./tap/

type endpoint interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	Close() error
}

type plainQueue struct{ *tap.Queue }

func (plainQueue) Close() error { return nil }

type benchVariant struct {
	name string
	open func(fd, batch int) (endpoint, error)
}

var benchVariants = []benchVariant{
	{"syscall", func(fd, _ int) (endpoint, error) { return plainQueue{tap.NewQueueFd(fd)}, nil }},
	{"uring", func(fd, batch int) (endpoint, error) { return tap.NewURingQueue(fd, batch) }},
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

// meter measures a benchmark's loop: wall time, this thread's CPU time and
// the machine's softirq time.
type meter struct {
	wall time.Time
	cpu  int64
	cpus procfs.CPUTimes
}

func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

func startMeter(b *testing.B) *meter {
	t, err := procfs.ReadCPUTimes()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	return &meter{wall: time.Now(), cpu: threadCPU(), cpus: t}
}

func (m *meter) report(b *testing.B, frames int) {
	wall, cpu := time.Since(m.wall), threadCPU()-m.cpu
	b.StopTimer()
	t, err := procfs.ReadCPUTimes()
	if err != nil {
		b.Fatal(err)
	}
	f := float64(frames)
	b.ReportMetric(float64(wall.Nanoseconds())/f, "ns/frame")
	b.ReportMetric(float64(cpu)/f, "cpu-ns/frame")
	b.ReportMetric(float64(t.Sub(m.cpus).SoftIRQ.Nanoseconds())/f, "sirq-ns/frame")
}

func BenchmarkTAPWrite(b *testing.B) {
	bed, d := labTAP(b)
	fd := d.Fds()[0]
	src, dst := bed.WireAddr.Addr(), bed.LabAddr.Addr()
	for _, size := range []struct {
		name  string
		ipLen int
		gso   bool
	}{{"mtu", 1500, false}, {"gso64k", 65000, true}} {
		frame := udpFrame(d.MAC(), src, dst, 9, 0, size.ipLen, size.gso)
		for _, batch := range []int{1, 8, 64} {
			bufs := make([][]byte, batch)
			for i := range bufs {
				bufs[i] = append([]byte(nil), frame...)
			}
			for _, v := range benchVariants {
				b.Run(fmt.Sprintf("%s/batch=%d/%s", size.name, batch, v.name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					q, err := v.open(fd, 64)
					if err != nil {
						b.Fatal(err)
					}
					defer q.Close()
					m := startMeter(b)
					for range b.N {
						if n, err := q.Write(bufs, 0); n != batch || err != nil {
							b.Fatalf("wrote %d of %d: %v", n, batch, err)
						}
					}
					m.report(b, b.N*batch)
				})
			}
		}
	}
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

func BenchmarkTAPRead(b *testing.B) {
	bed, d := labTAP(b)
	fd := d.Fds()[0]
	send, sa := labSender(b, bed, d)
	src, dst := bed.LabAddr.Addr(), bed.WireAddr.Addr()
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, vnethdr.Len+65536)
	}
	for _, size := range []struct {
		name  string
		ipLen int
		gso   bool
	}{{"mtu", 1500, false}, {"gso64k", 65000, true}} {
		frame := udpFrame(net.HardwareAddr{0x02, 0, 0x5e, 0, 0, 2}, src, dst, 9, 0, size.ipLen, size.gso)
		for _, queued := range []int{1, 8, 64} {
			for _, v := range benchVariants {
				b.Run(fmt.Sprintf("%s/queued=%d/%s", size.name, queued, v.name), func(b *testing.B) {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					q, err := v.open(fd, 64)
					if err != nil {
						b.Fatal(err)
					}
					defer q.Close()
					for n, _ := q.Read(bufs, sizes, 0); n > 0; n, _ = q.Read(bufs, sizes, 0) {
					}
					clock := cpuClockCost()
					var wall time.Duration
					var cpu int64
					frames := 0
					t0, err := procfs.ReadCPUTimes()
					if err != nil {
						b.Fatal(err)
					}
					for range b.N {
						for range queued {
							if err := unix.Sendto(send, frame, 0, sa); err != nil {
								b.Fatalf("sending into the TAP: %v", err)
							}
						}
						c, w := threadCPU(), time.Now()
						n, err := q.Read(bufs, sizes, 0)
						wall += time.Since(w)
						cpu += threadCPU() - c - clock
						if err != nil || n < queued {
							b.Fatalf("read %d of %d: %v", n, queued, err)
						}
						frames += n
					}
					t1, err := procfs.ReadCPUTimes()
					if err != nil {
						b.Fatal(err)
					}
					f := float64(frames)
					b.ReportMetric(float64(wall.Nanoseconds())/f, "ns/frame")
					b.ReportMetric(float64(cpu)/f, "cpu-ns/frame")
					b.ReportMetric(float64(t1.Sub(t0).SoftIRQ.Nanoseconds())/f, "sirq-ns/frame")
				})
			}
		}
	}
}
