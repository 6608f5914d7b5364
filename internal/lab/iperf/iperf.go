package iperf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Options for one iperf3 run. The zero value is a 5 s single-stream TCP
// test from wire to lab.
type Options struct {
	// Duration of the test (-t); iperf3 takes whole seconds, so it is
	// rounded up. 0 means 5 s. Ignored when Bytes is set.
	Duration time.Duration
	// Bytes, when positive, makes the sender stop after this many bytes
	// (-n) instead of after Duration. It sends whole writes (Len, 128 KiB
	// by default for TCP) and may write one more before it notices, so
	// Result.SentBytes is at least Bytes; the receiver may stop counting
	// at Bytes (Result.Bytes).
	Bytes int64
	// Omit runs this long before the test and leaves it out of the
	// figures (-O, whole seconds, rounded up): slow start and the first
	// scheduling of a fresh path are not measured. The run takes
	// Omit + Duration. 0 omits nothing.
	Omit time.Duration
	// Len is the message size in bytes (-l): the write size for TCP, the
	// datagram payload for UDP. 0 keeps iperf3's default.
	Len int
	// Streams is the number of parallel streams (-P); 0 means 1.
	Streams int
	// Reverse sends lab -> wire (-R) instead of wire -> lab.
	Reverse bool
	// UDP tests UDP (-u) instead of TCP.
	UDP bool
	// Bitrate is the target rate (-b), e.g. "0" for unlimited or "1G";
	// empty keeps iperf3's default (unlimited for TCP, 1 Mbit/s for UDP).
	Bitrate string
	// Port of the server; 0 picks one at random in 20000..60000.
	Port int
	// Pin, when set, pins the iperf3 processes to CPUs (-A); nil leaves
	// them to the scheduler.
	Pin *Pinning
	// Addr, when valid, is the address the server binds and the client
	// connects to instead of the bed's LabAddr: another address in the lab
	// namespace, such as one on a tunnel of the lab's own.
	Addr netip.Addr
	// Started, when set, is called once both processes run, with the
	// server's and the client's process ids, before Run waits for the
	// client: a caller that samples the processes while they run (their
	// threads' CPU time, their namespaces' counters) starts there.
	Started func(server, client int)
}

// Pinning names the CPU of the iperf3 process in each namespace: the
// client in the wire namespace and the server in the lab namespace.
type Pinning struct {
	Wire int `json:"wire"`
	Lab  int `json:"lab"`
}

// Result of one run, from the client's JSON report.
type Result struct {
	// BitsPerSecond is what the receiver got: sum_received for TCP, and for
	// UDP the rate of datagrams that arrived.
	BitsPerSecond float64
	// Bytes the receiver got (after the omitted start, with Omit).
	Bytes int64
	// SentBytes the sender wrote (end.sum_sent for TCP, end.sum for UDP).
	// A TCP receiver that stops counting when the sender says the test
	// ended can miss what was still on its way: a forward (client sends)
	// run often reports fewer Bytes than SentBytes.
	SentBytes int64
	// Retransmits counted by the sending side (TCP).
	Retransmits int
	// SenderCPU and ReceiverCPU are total CPU use in percent of one core
	// (cpu_utilization_percent host_total and remote_total, swapped for
	// Reverse runs, where the client is the receiver).
	SenderCPU, ReceiverCPU float64
	// UDP only: datagrams sent, datagrams lost, and the loss in percent.
	Packets, LostPackets int64
	LostPercent          float64
	// Raw is the client's JSON report.
	Raw []byte
}

var errNoIperf = errors.New("iperf3 not found: install it with apt-get install iperf3")

// Run runs one iperf3 test across b: a one-shot server (iperf3 -s -1) bound
// to b.LabAddr in b.LabNS and a client in b.WireNS. The server is always
// stopped before Run returns.
func Run(ctx context.Context, b *testbed.Bed, opt Options) (Result, error) {
	path, err := exec.LookPath("iperf3")
	if err != nil {
		return Result{}, errNoIperf
	}
	opt, err = opt.withDefaults()
	if err != nil {
		return Result{}, err
	}
	port := strconv.Itoa(opt.Port)
	addr := b.LabAddr.Addr().String()
	if opt.Addr.IsValid() {
		addr = opt.Addr.String()
	}

	// The test itself, plus generous time to start, exchange results and
	// stop; a wedged iperf3 must not hang the caller forever.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(opt.seconds()+opt.omitSeconds())*time.Second+30*time.Second)
	defer cancel()

	stop, srvPid, err := startServer(ctx, b, path, addr, port, opt.Pin)
	if err != nil {
		return Result{}, err
	}
	defer stop()

	args := opt.clientArgs(addr, port)
	cli := b.Command(ctx, b.WireNS, path, args...)
	var stdout, stderr bytes.Buffer
	cli.Stdout, cli.Stderr = &stdout, &stderr
	cerr := cli.Start()
	if cerr == nil {
		if opt.Started != nil {
			opt.Started(srvPid, cli.Process.Pid)
		}
		cerr = cli.Wait()
	}
	out := stdout.Bytes()
	res, perr := parse(out)
	switch {
	case perr != nil && cerr != nil:
		return Result{}, fmt.Errorf("iperf: iperf3 %s: %w: %s", strings.Join(args, " "), cerr, strings.TrimSpace(stderr.String()+" "+perr.Error()))
	case perr != nil:
		return Result{}, fmt.Errorf("iperf: iperf3 %s: %w", strings.Join(args, " "), perr)
	case cerr != nil:
		return Result{}, fmt.Errorf("iperf: iperf3 %s: %w: %s", strings.Join(args, " "), cerr, strings.TrimSpace(stderr.String()))
	}
	return res, nil
}

// withDefaults checks o and fills in what it leaves to Run: 5 s, one
// stream, a random port.
func (o Options) withDefaults() (Options, error) {
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Duration < 0 || o.Bytes < 0 || o.Omit < 0 || o.Len < 0 || o.Streams < 0 || o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("iperf: invalid options %+v", o)
	}
	if o.Streams == 0 {
		o.Streams = 1
	}
	if o.Port == 0 {
		o.Port = 20000 + mrand.IntN(40001)
	}
	return o, nil
}

// seconds is the test's length as iperf3 takes it (-t): whole seconds, at
// least one; omitSeconds is -O's.
func (o Options) seconds() int     { return max(1, int(math.Ceil(o.Duration.Seconds()))) }
func (o Options) omitSeconds() int { return int(math.Ceil(o.Omit.Seconds())) }

// clientArgs are the iperf3 client's arguments for o against addr:port.
func (o Options) clientArgs(addr, port string) []string {
	args := []string{"-c", addr, "-p", port, "-J", "-P", strconv.Itoa(o.Streams)}
	if o.Bytes > 0 {
		args = append(args, "-n", strconv.FormatInt(o.Bytes, 10))
	} else {
		args = append(args, "-t", strconv.Itoa(o.seconds()))
	}
	if omit := o.omitSeconds(); omit > 0 {
		args = append(args, "-O", strconv.Itoa(omit))
	}
	if o.Len > 0 {
		args = append(args, "-l", strconv.Itoa(o.Len))
	}
	if o.Reverse {
		args = append(args, "-R")
	}
	if o.UDP {
		args = append(args, "-u")
	}
	if o.Bitrate != "" {
		args = append(args, "-b", o.Bitrate)
	}
	if o.Pin != nil {
		// -A n,m would also pin the server, but the server was started
		// with its own -A already.
		args = append(args, "-A", strconv.Itoa(o.Pin.Wire))
	}
	return args
}

// startServer starts a one-shot iperf3 server on addr:port in b.LabNS
// (pinned to pin.Lab when pin is set) and waits until it listens. stop
// kills it, if it still runs, and waits for it; pid is its process id.
func startServer(ctx context.Context, b *testbed.Bed, path, addr, port string, pin *Pinning) (stop func(), pid int, err error) {
	srvArgs := []string{"-s", "-1", "-B", addr, "-p", port}
	if pin != nil {
		srvArgs = append(srvArgs, "-A", strconv.Itoa(pin.Lab))
	}
	srv := b.Command(ctx, b.LabNS, path, srvArgs...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return nil, 0, fmt.Errorf("iperf: starting server in %s: %w", b.LabNS, err)
	}
	srvDone := make(chan struct{})
	var srvErr error
	go func() { srvErr = srv.Wait(); close(srvDone) }()
	stop = func() {
		srv.Process.Kill() // fails harmlessly once it exited
		<-srvDone
	}
	if err := waitListening(ctx, b, port, srvDone); err != nil {
		select {
		case <-srvDone:
			err = fmt.Errorf("iperf: server in %s exited before listening: %v: %s", b.LabNS, srvErr, strings.TrimSpace(srvOut.String()))
		default:
		}
		stop()
		return nil, 0, err
	}
	return stop, srv.Process.Pid, nil
}

// waitListening polls ss in the lab namespace until the server listens on
// port (its TCP control connection; UDP tests use it too).
func waitListening(ctx context.Context, b *testbed.Bed, port string, srvDone <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := b.Run(ctx, b.LabNS, "ss", "-Hltn", "sport", "=", ":"+port)
		if err == nil && strings.TrimSpace(out) != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("iperf: waiting for the server to listen on port %s in %s: %w (ss: %v)", port, b.LabNS, ctx.Err(), err)
		case <-srvDone:
			return errors.New("iperf: server exited")
		case <-tick.C:
		}
	}
}

// report is the part of iperf3's -J output that Run uses
// (iperf3 src/iperf_api.c: iperf_print_results).
type report struct {
	Start struct {
		TestStart struct {
			Protocol string `json:"protocol"`
			Reverse  int    `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		Sum         *sum `json:"sum"`
		SumSent     *sum `json:"sum_sent"`
		SumReceived *sum `json:"sum_received"`
		CPU         struct {
			HostTotal   float64 `json:"host_total"`
			RemoteTotal float64 `json:"remote_total"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
	Error string `json:"error"`
}

type sum struct {
	Seconds       float64 `json:"seconds"`
	Bytes         int64   `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	Retransmits   int     `json:"retransmits"`
	Packets       int64   `json:"packets"`
	LostPackets   int64   `json:"lost_packets"`
	LostPercent   float64 `json:"lost_percent"`
}

// parse reads a client's -J report. The protocol and direction come from the
// report itself.
func parse(raw []byte) (Result, error) {
	var r report
	if err := json.Unmarshal(raw, &r); err != nil {
		return Result{}, fmt.Errorf("parsing iperf3 JSON: %w", err)
	}
	if r.Error != "" {
		return Result{}, fmt.Errorf("iperf3: %s", r.Error)
	}
	res := Result{Raw: raw}
	res.SenderCPU, res.ReceiverCPU = r.End.CPU.HostTotal, r.End.CPU.RemoteTotal
	if r.Start.TestStart.Reverse != 0 {
		res.SenderCPU, res.ReceiverCPU = res.ReceiverCPU, res.SenderCPU
	}
	switch r.Start.TestStart.Protocol {
	case "TCP":
		if r.End.SumReceived == nil || r.End.SumSent == nil {
			return Result{}, errors.New("iperf3 JSON: TCP report without end.sum_sent and end.sum_received")
		}
		res.BitsPerSecond = r.End.SumReceived.BitsPerSecond
		res.Bytes, res.SentBytes = r.End.SumReceived.Bytes, r.End.SumSent.Bytes
		res.Retransmits = r.End.SumSent.Retransmits
	case "UDP":
		// end.sum is the sender's count with the receiver's loss merged in;
		// end.sum_received (present in iperf3 3.12) is what arrived, and
		// its packets and lost_packets cover the receiver's own window.
		// The two windows differ with -R: the server keeps sending until
		// the client's stop reaches it (3.1 s of sending for a 2 s test in
		// testdata/udp_reverse.json), so end.sum divides the loss in the
		// receiver's window by everything sent.
		s := r.End.Sum
		if s == nil {
			return Result{}, errors.New("iperf3 JSON: UDP report without end.sum")
		}
		res.Packets, res.LostPackets, res.LostPercent = s.Packets, s.LostPackets, s.LostPercent
		res.SentBytes = s.Bytes
		if rs := r.End.SumReceived; rs != nil {
			res.Bytes, res.BitsPerSecond = rs.Bytes, rs.BitsPerSecond
			if rs.Packets > 0 {
				res.Packets, res.LostPackets = rs.Packets, rs.LostPackets
				res.LostPercent = 100 * float64(rs.LostPackets) / float64(rs.Packets)
			}
		} else if s.Packets > 0 {
			// Older reports: scale the sent figures by the share that arrived.
			got := float64(s.Packets-s.LostPackets) / float64(s.Packets)
			res.Bytes = int64(math.Round(float64(s.Bytes) * got))
			res.BitsPerSecond = s.BitsPerSecond * got
		}
	default:
		return Result{}, fmt.Errorf("iperf3 JSON: unknown protocol %q", r.Start.TestStart.Protocol)
	}
	return res, nil
}
