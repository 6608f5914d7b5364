package afxdp

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/uring"
	"github.com/tapfwd/tapfwd/napi"
)

// TestExpBusyPoll: which kernel busy poll reaches a veth's NAPI on this
// kernel. A reflector on the XSK sends every frame back; the wire side
// measures round trips; BusyPollRxPackets (TcpExt) counts frames a busy
// poll received.
func TestExpBusyPoll(t *testing.T) {
	if os.Getenv("TAPFWD_EXP") == "" {
		t.Skip("experiment")
	}
	for _, mode := range strings.Fields(os.Getenv("TAPFWD_EXP")) {
		t.Run(mode, func(t *testing.T) { expBusyPoll(t, mode) })
	}
}

func expBusyPoll(t *testing.T, mode string) {
	b := newBed(t, 1500)
	var bp *BusyPoll
	if mode == "sockopt" || mode == "epoll" {
		bp = &BusyPoll{Usecs: 200, Budget: 64, Prefer: true, Inline: true}
	}
	n := b.open(Config{Ifname: b.NIC, Mode: ModeNative, Bind: BindCopy, BusyPoll: bp})
	s := n.Sockets()[0]
	var ids []uint32
	err := b.Do(b.FwdNS, func() error {
		c, err := napi.Dial()
		if err != nil {
			return err
		}
		defer c.Close()
		ifi, err := netIfindex(b.NIC)
		if err != nil {
			return err
		}
		list, err := c.List(ifi)
		for _, x := range list {
			ids = append(ids, x.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := s.NAPIID()
	t.Logf("veth NAPI ids %v, socket's %d", ids, id)
	w0 := b.mac(b.WireNS, b.WireIf)
	w1 := b.mac(b.FwdNS, b.NIC)

	stop := make(chan struct{})
	done := make(chan error, 1)
	cpuNs := make(chan int64, 1)
	go func() { done <- reflect(s, mode, ids, stop, cpuNs) }()
	if mode == "uring-own-cpu" {
		go spinner(ids, stop)
	}
	time.Sleep(100 * time.Millisecond)
	before := busyPollPkts(t, b)
	sirqBefore := netRX()
	var rtts []time.Duration
	const rounds = 3000
	err = b.Do(b.WireNS, func() error {
		var old, set unix.CPUSet
		unix.SchedGetaffinity(0, &old)
		defer unix.SchedSetaffinity(0, &old)
		set.Set(0)
		unix.SchedSetaffinity(0, &set)
		var e error
		rtts, e = pingPong(b.WireIf, w0, w1, rounds)
		return e
	})
	sirqAfter := netRX()
	after := busyPollPkts(t, b)
	close(stop)
	if rerr := <-done; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rtts)
	q := func(p float64) time.Duration { return rtts[int(p*float64(len(rtts)-1))] }
	var sirq []string
	for i := range sirqAfter {
		sirq = append(sirq, fmt.Sprintf("cpu%d %.2f", i, float64(sirqAfter[i]-sirqBefore[i])/float64(len(rtts))))
	}
	t.Logf("%-14s %d round trips: p5 %v p50 %v p99 %v; BusyPollRxPackets +%d; NET_RX per round trip: %s; reflector CPU %.1f µs per round trip",
		mode, len(rtts), q(0.05), q(0.5), q(0.99), after-before, strings.Join(sirq, " "), float64(<-cpuNs)/1e3/float64(len(rtts)))
}

func netIfindex(name string) (int, error) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(l)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(l, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, err
	}
	return int(ifr.Uint32()), nil
}

// reflect sends back every frame s receives, waiting as mode says, on
// CPU 1.
func reflect(s *Socket, mode string, ids []uint32, stop chan struct{}, cpuNs chan int64) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(1)
	if mode == "uring-own-cpu" {
		set = unix.CPUSet{}
		set.Set(0)
	}
	unix.SchedSetaffinity(0, &set)
	bufs := make([][]byte, 64)
	sizes := make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	var p *uring.Poller
	if mode == "uring" {
		var err error
		p, err = uring.NewPoller(uring.NAPI{IDs: ids, BusyPoll: expBusy, Prefer: true})
		if err != nil {
			return err
		}
		defer p.Close()
	}
	ep := -1
	if mode == "epoll" {
		var err error
		if ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return err
		}
		defer unix.Close(ep)
		unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, s.Fd(), &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.Fd())})
		// struct epoll_params: busy_poll_usecs u32, budget u16, prefer u8, pad u8.
		prm := [8]byte{}
		binary.LittleEndian.PutUint32(prm[0:], 200)
		binary.LittleEndian.PutUint16(prm[4:], 64)
		prm[6] = 1
		const epiocsparams = 0x40088a01
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(ep), epiocsparams, uintptr(unsafe.Pointer(&prm[0]))); e != 0 {
			return fmt.Errorf("EPIOCSPARAMS: %v", e)
		}
	}
	start := threadCPU()
	defer func() { cpuNs <- threadCPU() - start }()
	pfd := []unix.PollFd{{Fd: int32(s.Fd()), Events: unix.POLLIN}}
	ts := unix.NsecToTimespec(int64(50 * time.Millisecond))
	evs := make([]unix.EpollEvent, 4)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		n, err := s.Read(bufs, sizes, 0)
		if n > 0 {
			out := make([][]byte, n)
			for i := range n {
				out[i] = bufs[i][:sizes[i]]
			}
			for len(out) > 0 {
				k, werr := s.Write(out, 0)
				out = out[k:]
				if werr != nil && werr != unix.EAGAIN {
					return werr
				}
			}
			continue
		}
		if err != unix.EAGAIN {
			return err
		}
		switch mode {
		case "uring":
			if err := p.Wait(pfd, &ts); err != nil && err != unix.EINTR {
				return err
			}
		case "epoll":
			unix.EpollWait(ep, evs, 50)
		default:
			unix.Ppoll(pfd, &ts, nil)
		}
	}
}

// spinner busy-polls ids from CPU 1 until stop.
func spinner(ids []uint32, stop chan struct{}) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(1)
	unix.SchedSetaffinity(0, &set)
	p, err := uring.NewPoller(uring.NAPI{IDs: ids, BusyPoll: expBusy, Prefer: true})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	t0, c0 := time.Now(), threadCPU()
	for {
		select {
		case <-stop:
			fmt.Printf("spinner: %.0f%% of a CPU\n", 100*float64(threadCPU()-c0)/float64(time.Since(t0)))
			return
		default:
		}
		if err := p.Spin(expBusy); err != nil {
			panic(err)
		}
	}
}

func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// pingPong sends rounds frames from dev (src) to dst one at a time and
// times each one's reflection.
func pingPong(dev string, src, dst []byte, rounds int) ([]time.Duration, error) {
	ifi, err := netIfindex(dev)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(0x88b5)))
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(0x88b5), Ifindex: ifi}); err != nil {
		return nil, err
	}
	tv := unix.Timeval{Usec: 200000}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	f := make([]byte, 64)
	copy(f, dst)
	copy(f[6:], src)
	f[12], f[13] = 0x88, 0xb5
	buf := make([]byte, 2048)
	var rtts []time.Duration
	for i := range rounds {
		binary.BigEndian.PutUint32(f[14:], uint32(i))
		t0 := time.Now()
		if _, err := unix.Write(fd, f); err != nil {
			return nil, err
		}
		for {
			n, sa, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break // lost
			}
			if ll, ok := sa.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if n >= 18 && binary.BigEndian.Uint32(buf[14:]) == uint32(i) {
				rtts = append(rtts, time.Since(t0))
				break
			}
		}
	}
	return rtts, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func busyPollPkts(t *testing.T, b *bed) uint64 {
	out := b.run(b.FwdNS, "cat", "/proc/net/netstat")
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		k, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		for j := range k {
			if k[j] == "BusyPollRxPackets" && j < len(v) {
				n, _ := strconv.ParseUint(v[j], 10, 64)
				return n
			}
		}
	}
	t.Fatal("no BusyPollRxPackets")
	return 0
}

func netRX() []uint64 {
	b, _ := os.ReadFile("/proc/softirqs")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "NET_RX:" {
			var out []uint64
			for _, x := range f[1:] {
				n, _ := strconv.ParseUint(x, 10, 64)
				out = append(out, n)
			}
			return out
		}
	}
	return nil
}

var expBusy = func() time.Duration {
	d, err := time.ParseDuration(os.Getenv("TAPFWD_EXP_BUSY"))
	if err != nil {
		return 200 * time.Microsecond
	}
	return d
}()
