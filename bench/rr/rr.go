package rr

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// A request/response tool in the manner of the kernel's xsk_rr, over plain
// UDP sockets: an echo server in the lab namespace, a client in the wire
// namespace. The client's sender sends requests open-loop at a fixed rate
// (each carries a sequence number and its send time); its receiver reads the
// replies, records the round-trip time, then spends the application delay
// busy-waiting before it reads the next one, so replies that arrive
// meanwhile wait in the socket, as they would for an application that
// processes each reply.
//
// Each of the three loops runs on its own OS thread and blocks in the
// kernel (recv, clock_nanosleep), never in Go's netpoller, whose timers
// have millisecond granularity. The sender sleeps to each send time with
// clock_nanosleep(TIMER_ABSTIME) and a timer slack of 1 ns; it does not
// spin, so it costs little CPU, and how late it wakes is recorded as the
// send lag. When it wakes late it sends the slots due back to back, up to
// maxCatchUp of them, so the rate holds on a busy machine.

// Options configure one request/response run.
type Options struct {
	// Rate is the request rate, per second; it must be positive.
	Rate float64
	// Delay is the application delay: the receiver busy-waits this long
	// after each reply before it reads the next one. 0 reads at once.
	Delay time.Duration
	// Duration is the measured part of the run; 0 means 2 s.
	Duration time.Duration
	// Warmup is sent before the measured part and not counted; 0 means
	// 200 ms, negative none.
	Warmup time.Duration
	// Payload is the UDP payload in bytes (rrHeader to 1400); 0 means
	// DefaultPayload.
	Payload int
	// Drain is how long the receiver waits for the last replies after the
	// last request (plus Delay); 0 means 200 ms.
	Drain time.Duration
	// SenderFIFO, when not 0, gives the sender's thread SCHED_FIFO with
	// this priority (1 to 99), as the reference ran xsk_rr under
	// chrt -f 50: requests then leave on time whatever else wants the
	// CPU, a forwarder spinning on it included. The sender sleeps between
	// requests, so it takes little. Without the privilege it stays an
	// ordinary thread (Result.SenderFIFO says which).
	SenderFIFO int
	// Thread, when set, is told each of the run's three threads as it
	// starts (role: Sender, Receiver or Echo; tid: its thread id), so
	// that a profile can follow where they ran and how long they waited.
	Thread func(role string, tid int)
}

// The roles of a run's threads (Options.Thread).
const (
	Sender   = "rr sender"   // the client's thread that sends the requests (wire)
	Receiver = "rr receiver" // the client's thread that reads the replies and applies the delay (wire)
	Echo     = "rr echo"     // the server's thread that echoes every request (lab)
)

// started tells o.Thread that the calling goroutine, locked to its
// thread, runs role.
func (o Options) started(role string) {
	if o.Thread != nil {
		o.Thread(role, unix.Gettid())
	}
}

// DefaultPayload is the request size: small, like xsk_rr's.
const DefaultPayload = 64

// Request layout (little endian): magic, run id, sequence number, send time
// in ns since the run's base time.
const (
	rrMagic      = 0x52_4c_46_54 // "TFLR"
	rrHeader     = 24
	maxRRPayload = 1400
)

func (o Options) withDefaults() (Options, error) {
	if o.Rate <= 0 || o.Rate > 10e6 {
		return o, fmt.Errorf("rr: rate %v per second: want more than 0 and at most 10M", o.Rate)
	}
	if o.Delay < 0 || o.Delay > time.Second {
		return o, fmt.Errorf("rr: delay %v: want 0 to 1s", o.Delay)
	}
	if o.Duration == 0 {
		o.Duration = 2 * time.Second
	}
	if o.Duration < 0 {
		return o, fmt.Errorf("rr: duration %v", o.Duration)
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = 200 * time.Millisecond
	case o.Warmup < 0:
		o.Warmup = 0
	}
	if o.Payload == 0 {
		o.Payload = DefaultPayload
	}
	if o.Payload < rrHeader || o.Payload > maxRRPayload {
		return o, fmt.Errorf("rr: payload %d bytes: want %d to %d", o.Payload, rrHeader, maxRRPayload)
	}
	if o.Drain <= 0 {
		o.Drain = 200 * time.Millisecond
	}
	if o.SenderFIFO < 0 || o.SenderFIFO > 99 {
		return o, fmt.Errorf("rr: SCHED_FIFO priority %d: want 1 to 99, or 0 for none", o.SenderFIFO)
	}
	return o, nil
}

// Result is what one run measured. The counts cover the measured part
// only.
type Result struct {
	Sent uint64 // requests sent
	// Arrived is the number of requests the server received; Sent -
	// Arrived were lost on the way there, Arrived - Received on the way
	// back.
	Arrived  uint64
	Received uint64 // replies received (round-trip times recorded)
	// Reordered counts replies whose sequence number is below one already
	// received.
	Reordered uint64
	// Missed counts send slots skipped because the sender woke maxCatchUp
	// periods late or more. A sender less late catches up, sending the
	// slots due back to back.
	Missed uint64
	// SendErrors counts requests the socket refused (ENOBUFS, ...); they
	// are not in Sent.
	SendErrors uint64
	Duration   time.Duration    // the measured part
	RTT        *stats.Histogram // round-trip times
	// SendLag is how late the sender woke for each request's slot; after a
	// stall that made it skip slots, the length of the stall.
	SendLag *stats.Histogram
	// SenderFIFO says whether the sender ran under SCHED_FIFO.
	SenderFIFO bool
	// SenderCPU is the CPU time of the sender's thread over the run (its
	// writes include the kernel's work on each request up to the next
	// queue), as a share of one CPU.
	SenderCPU float64
}

// Rate is the achieved request rate: requests sent per second.
func (r *Result) Rate() float64 { return float64(r.Sent) / r.Duration.Seconds() }

// LossPercent is the share of requests without a reply, in percent.
func (r *Result) LossPercent() float64 {
	if r.Sent == 0 {
		return 0
	}
	return 100 * float64(r.Sent-min(r.Received, r.Sent)) / float64(r.Sent)
}

// RoundTrips runs the request/response tool across bed: the echo server's
// socket is opened in bed.LabNS on the lab address, the client's in
// bed.WireNS on the wire address. It returns when the run is over or ctx
// ends (then with ctx's error); both sockets are closed by then.
func RoundTrips(ctx context.Context, b *testbed.Bed, o Options) (*Result, error) {
	var client, server int = -1, -1
	defer func() {
		for _, fd := range []int{client, server} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	err := b.Do(b.WireNS, func() (err error) {
		client, err = udpSocket(b.WireAddr.Addr())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rr: client socket in %s: %w", b.WireNS, err)
	}
	err = b.Do(b.LabNS, func() (err error) {
		server, err = udpSocket(b.LabAddr.Addr())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rr: server socket in %s: %w", b.LabNS, err)
	}
	if err := connectPair(client, server); err != nil {
		return nil, err
	}
	return runRR(ctx, client, server, o)
}

// udpSocket opens a blocking UDP socket bound to addr and a port the kernel
// picks, with a short receive timeout so that its reader can notice a stop.
func udpSocket(addr netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr.As4()}); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	tv := unix.NsecToTimeval(int64(rrPollInterval))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt SO_RCVTIMEO", err)
	}
	return fd, nil
}

// maxCatchUp is the longest burst the sender sends to catch up after
// waking late (a loaded machine, a preempted thread), in slots; a stall
// longer than that skips the slots in it.
const maxCatchUp = 16

// rrPollInterval is how often the blocked readers look at the stop flag.
const rrPollInterval = 10 * time.Millisecond

// connectPair connects two bound UDP sockets to each other, so that both
// sides use plain read and write (no address to allocate per datagram).
func connectPair(a, b int) error {
	sa, err := unix.Getsockname(a)
	if err != nil {
		return os.NewSyscallError("getsockname", err)
	}
	sb, err := unix.Getsockname(b)
	if err != nil {
		return os.NewSyscallError("getsockname", err)
	}
	if err := unix.Connect(a, sb); err != nil {
		return os.NewSyscallError("connect", err)
	}
	if err := unix.Connect(b, sa); err != nil {
		return os.NewSyscallError("connect", err)
	}
	return nil
}

// rrMu serialises runs in this process: they would disturb each other, and
// each raises GOMAXPROCS for its duration.
var rrMu sync.Mutex

// runRR runs the server on server and the client on client (connected UDP
// sockets).
func runRR(ctx context.Context, client, server int, o Options) (*Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	rrMu.Lock()
	defer rrMu.Unlock()
	// Three loops block in syscalls on their own threads and the receiver
	// spins through the delay: with GOMAXPROCS at the CPU count, a thread
	// coming back from the kernel could find every P taken and wait for
	// sysmon to free one (tens of microseconds and more). Spare Ps cost
	// nothing; the threads still share the CPUs as any process's would.
	if p := runtime.GOMAXPROCS(0); p < runtime.NumCPU()+4 {
		runtime.GOMAXPROCS(runtime.NumCPU() + 4)
		defer runtime.GOMAXPROCS(p)
	}
	r := &rrRun{o: o, client: client, server: server,
		res: &Result{Duration: o.Duration, RTT: new(stats.Histogram), SendLag: new(stats.Histogram)}}
	if r.base, r.baseMono, err = monoBase(); err != nil {
		return nil, err
	}
	r.run = rand.Uint32() &^ 1 // warm-up requests carry run, measured ones run|1
	stopAll := context.AfterFunc(ctx, func() { r.stop.Store(true) })
	defer stopAll()

	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = r.serve() }()
	go func() { defer wg.Done(); errs[1] = r.receive() }()
	sent := make(chan struct{})
	go func() { defer close(sent); errs[2] = r.send() }()
	<-sent
	// Wait for the last replies.
	deadline := time.Now().Add(o.Drain + o.Delay)
	for r.received.Load() < r.res.Sent && time.Now().Before(deadline) && !r.stop.Load() {
		time.Sleep(time.Millisecond)
	}
	r.stop.Store(true)
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.res.Received = r.received.Load()
	r.res.Arrived = r.arrived.Load()
	return r.res, nil
}

// monoBase reads Go's clock and CLOCK_MONOTONIC (the clock the sender
// sleeps on) at one instant, as nearly as it can: Go's monotonic clock is
// CLOCK_MONOTONIC, but it does not give its reading, so base is taken
// between two clock_gettime calls and baseMono is their midpoint. Of a few
// tries the closest pair wins; an error in baseMono would show as a
// constant send lag.
func monoBase() (base time.Time, baseMono int64, err error) {
	gap := int64(-1)
	for range 5 {
		var t0, t1 unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &t0); err != nil {
			return base, 0, os.NewSyscallError("clock_gettime", err)
		}
		b := time.Now()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &t1); err != nil {
			return base, 0, os.NewSyscallError("clock_gettime", err)
		}
		if g := t1.Nano() - t0.Nano(); gap < 0 || g < gap {
			gap, base, baseMono = g, b, t0.Nano()+g/2
		}
	}
	return base, baseMono, nil
}

type rrRun struct {
	o              Options
	client, server int
	base           time.Time // the run's clock: time.Since(base)
	baseMono       int64     // CLOCK_MONOTONIC at base, ns
	run            uint32
	stop           atomic.Bool
	received       atomic.Uint64
	arrived        atomic.Uint64
	// res: Sent, Missed, SendErrors and SendLag belong to the sender,
	// RTT and Reordered to the receiver, until both are done.
	res *Result
}

func (r *rrRun) now() time.Duration { return time.Since(r.base) }

// temporary reports whether a socket error only means "nothing now" or a
// passing condition (an ICMP error reported on a connected socket, a full
// queue).
func temporary(err error) bool {
	switch err {
	case unix.EAGAIN, unix.EINTR, unix.ECONNREFUSED, unix.ENOBUFS, unix.EHOSTUNREACH, unix.ENETUNREACH:
		return true
	}
	return false
}

// serve echoes every datagram back until stopped.
func (r *rrRun) serve() error {
	return r.readEach(Echo, "rr server", r.server, func(b []byte) error {
		if len(b) >= rrHeader && binary.LittleEndian.Uint32(b[4:])&1 == 1 {
			r.arrived.Add(1)
		}
		if _, err := unix.Write(r.server, b); err != nil && !temporary(err) {
			return os.NewSyscallError("rr server: write", err)
		}
		return nil
	})
}

// receive reads replies, records their round-trip times and applies the
// delay, until stopped.
func (r *rrRun) receive() error {
	meas := r.run | 1
	var last uint64
	delay := r.o.Delay
	return r.readEach(Receiver, "rr client", r.client, func(b []byte) error {
		now := r.now()
		if len(b) < rrHeader || binary.LittleEndian.Uint32(b) != rrMagic || binary.LittleEndian.Uint32(b[4:]) != meas {
			return nil // a warm-up reply
		}
		seq := binary.LittleEndian.Uint64(b[8:])
		r.res.RTT.Record(now - time.Duration(binary.LittleEndian.Uint64(b[16:])))
		if seq < last {
			r.res.Reordered++
		}
		last = max(last, seq)
		r.received.Add(1)
		if delay > 0 {
			// The application's work: busy, as xsk_rr's delay is.
			for end := now + delay; r.now() < end; {
			}
		}
		return nil
	})
}

// readEach reads the datagrams of fd on a thread of its own, announced
// to o.Thread as role, and hands each to handle, until stopped or handle
// fails; a read's temporary error is passed over, another ends it, named
// after side.
func (r *rrRun) readEach(role, side string, fd int, handle func([]byte) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r.o.started(role)
	buf := make([]byte, 2048)
	for !r.stop.Load() {
		n, err := unix.Read(fd, buf)
		if err != nil {
			if temporary(err) {
				continue
			}
			return os.NewSyscallError(side+": read", err)
		}
		if err := handle(buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

// send sends the requests, one per slot of 1/Rate, warm-up first.
func (r *rrRun) send() error {
	defer r.senderThread()()
	buf := r.request()
	period := float64(time.Second) / r.o.Rate
	t0 := r.now() + time.Millisecond
	measStart := t0 + r.o.Warmup
	end := measStart + r.o.Duration
	res := r.res
	for k := int64(0); !r.stop.Load(); k++ {
		slot := t0 + time.Duration(float64(k)*period)
		if slot >= end {
			break
		}
		now := r.sleepUntil(slot)
		lag := now - slot // how late for its slot, before any skip
		if late := float64(lag); late >= maxCatchUp*period {
			// Woke far too late: skip to the newest slot rather than
			// send a long burst.
			skip := int64(late / period)
			if slot >= measStart {
				res.Missed += uint64(skip)
			}
			k += skip
			slot = t0 + time.Duration(float64(k)*period)
			if slot >= end {
				break
			}
		}
		id := r.run
		if slot >= measStart {
			id |= 1
		}
		binary.LittleEndian.PutUint32(buf[4:], id)
		binary.LittleEndian.PutUint64(buf[8:], uint64(k))
		binary.LittleEndian.PutUint64(buf[16:], uint64(r.now()))
		_, err := unix.Write(r.client, buf)
		if slot < measStart {
			continue
		}
		switch {
		case err == nil:
			res.Sent++
			res.SendLag.Record(lag)
		case temporary(err):
			res.SendErrors++
		default:
			return os.NewSyscallError("rr client: write", err)
		}
	}
	return nil
}

// senderThread readies the sender's thread: locked to it (its timer slack
// and perhaps its policy change, so it ends with the goroutine instead of
// serving others), a timer slack of 1 ns (the default 50 us would blur
// every slot) and SCHED_FIFO when asked. The returned function records the
// share of a CPU the thread used.
func (r *rrRun) senderThread() (done func()) {
	runtime.LockOSThread()
	r.o.started(Sender)
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if p := r.o.SenderFIFO; p > 0 {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(p)}
		r.res.SenderFIFO = unix.SchedSetAttr(0, &attr, 0) == nil
	}
	var cpu0 unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &cpu0)
	wall0 := r.now()
	return func() {
		var cpu1 unix.Timespec
		if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &cpu1) == nil {
			r.res.SenderCPU = float64(cpu1.Nano()-cpu0.Nano()) / float64(r.now()-wall0)
		}
	}
}

// request is a request's buffer: the magic, room for the run, sequence
// number and send time, and a patterned payload.
func (r *rrRun) request() []byte {
	buf := make([]byte, r.o.Payload)
	for i := rrHeader; i < len(buf); i++ {
		buf[i] = byte(i)
	}
	binary.LittleEndian.PutUint32(buf, rrMagic)
	return buf
}

// sleepUntil sleeps until slot on the monotonic clock, if it is still
// ahead, and returns the time it woke.
func (r *rrRun) sleepUntil(slot time.Duration) time.Duration {
	now := r.now()
	if slot <= now {
		return now
	}
	abs := unix.NsecToTimespec(r.baseMono + int64(slot))
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &abs, nil) == unix.EINTR {
	}
	return r.now()
}
