package forwarder

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/napi"
)

func TestArgs(t *testing.T) {
	check := func(o Options, args string, needs uint32) {
		t.Helper()
		if got := strings.Join(o.Args(), " "); got != args {
			t.Errorf("%+v: Args %q, want %q", o, got, args)
		}
		if got := o.Needs(); got != needs {
			t.Errorf("%+v: Needs %#x, want %#x", o, got, needs)
		}
	}
	check(Options{}, "", 0)
	check(Options{NAPI: Off, VnetHdr: On}, "--napi off --vnet-hdr on", unix.IFF_VNET_HDR)
	check(Options{Queues: 2, NAPI: Auto, VnetHdr: Auto}, "--queues 2 --napi auto --vnet-hdr auto", unix.IFF_MULTI_QUEUE)
	check(Options{NAPI: On, VnetHdr: On, TAPGROFlushTimeout: 20 * time.Microsecond, TAPNAPIDeferHardIRQs: 1},
		"--napi on --vnet-hdr on --tap-gro-flush-timeout 20us --tap-napi-defer-hard-irqs 1", unix.IFF_NAPI|unix.IFF_VNET_HDR)
	check(Options{NAPI: On, Poll: Block, TAPNAPIThreaded: true}, "--napi on --poll block --tap-napi-threaded", unix.IFF_NAPI)
	check(Options{NAPI: On, TAPNAPIThreaded: true, TAPNAPICPU: CPU(1)}, "--napi on --tap-napi-threaded --tap-napi-cpu 1", unix.IFF_NAPI)
	check(Options{NAPI: Auto, Poll: Block, NICNAPIThreaded: napi.ThreadedBusyPoll, NICNAPICPU: CPU(0)},
		"--napi auto --poll block --nic-napi-threaded busy-poll --nic-napi-cpu 0", 0)
	check(Options{TAPGROFlushTimeout: 1500 * time.Nanosecond, NoGRO: true}, "--tap-gro-flush-timeout 1.5µs --gro=false", 0)
	check(Options{NICBackend: XDP, NICGRO: On}, "--nic-backend xdp --nic-gro on", 0)
	check(Options{ABControl: "/run/ab", TAPNAPIThreaded: true}, "--tap-napi-threaded --ab-control /run/ab", unix.IFF_MULTI_QUEUE|unix.IFF_NAPI)
	check(Options{ABControl: "/run/ab", ABNAPI: [2]Switch{Off, Off}, ABDelay: 20 * time.Microsecond, Batch: 8},
		"--batch 8 --ab-control /run/ab --ab-napi off,off --ab-delay 20us", unix.IFF_MULTI_QUEUE)
}

func TestWorkerArgs(t *testing.T) {
	o := Options{NAPI: On, GROWindow: 50 * time.Microsecond, Batch: 256, CPUs: "none", TAPIO: "uring", PProf: true, NoGRO: true}
	want := "--napi on --gro=false --gro-window 50us --batch 256 --cpus none --tap-io uring --metrics-addr " + MetricsAddr + " --pprof"
	if got := strings.Join(o.Args(), " "); got != want {
		t.Errorf("Args %q, want %q", got, want)
	}
	if got := strings.Join(o.Flags(), " "); got != "napi gro gro-window batch cpus tap-io metrics-addr pprof" {
		t.Errorf("Flags %q", got)
	}
}

// TestSupported reads the flags of a real tapfwd binary's help: every
// flag the bench's options give today is there, a lever's flag that the
// binary lacks is missing, and an unchecked set misses nothing.
func TestSupported(t *testing.T) {
	dir := t.TempDir()
	exe := dir + "/tapfwd"
	if out, err := exec.Command("go", "build", "-o", exe, "../../cmd/tapfwd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flags, err := Supported(context.Background(), exe)
	if err != nil {
		t.Fatal(err)
	}
	have := Options{Queues: 2, NAPI: On, VnetHdr: On, Poll: Busy, TAPNAPIThreaded: true, TAPNAPICPU: CPU(1),
		TAPGROFlushTimeout: time.Microsecond, TAPNAPIDeferHardIRQs: 1, NICNAPIThreaded: napi.ThreadedEnabled, NICNAPICPU: CPU(0),
		NoGRO: true, NICGRO: On, Batch: 8, CPUs: "0", Split: true, FollowLoad: "true", Spin: time.Microsecond, PProf: true, ABControl: "/run/ab", ABNAPI: [2]Switch{On, Off}, ABDelay: time.Microsecond}
	if m := have.Missing(flags); len(m) > 0 {
		t.Errorf("the binary lacks %v; its flags: %v", m, flags)
	}
	if m := (Options{TAPIO: "uring", Queues: 1}).Missing(map[string]bool{"queues": true}); strings.Join(m, " ") != "--tap-io" {
		t.Errorf("Missing %v, want [--tap-io]", m)
	}
	if m := (Options{TAPIO: "uring"}).Missing(nil); m != nil {
		t.Errorf("unchecked: Missing %v", m)
	}
	if _, err := Supported(context.Background(), "/bin/true"); err == nil {
		t.Error("a binary without help gave flags")
	}
}

// TestRunFlags checks the table of tapfwd's flags: each named once, and
// an Options that sets every field gives every one of them, once each,
// in Args as in Flags.
func TestRunFlags(t *testing.T) {
	all := Options{Queues: 2, NAPI: On, VnetHdr: On, Poll: Kernel, NICBackend: XDP, NICGRO: On, TAPNAPIThreaded: true, TAPNAPICPU: CPU(1),
		TAPGROFlushTimeout: time.Microsecond, TAPNAPIDeferHardIRQs: 1, NICNAPIThreaded: napi.ThreadedEnabled, NICNAPICPU: CPU(0),
		BusyPollCPU: CPU(1), NoGRO: true, GROWindow: time.Microsecond, Batch: 8, CPUs: "0", Split: true, FollowLoad: "true", Spin: time.Microsecond, TAPIO: "uring", PProf: true,
		ABControl: "/run/ab", ABNAPI: [2]Switch{Off, On}, ABDelay: time.Microsecond}
	names := all.Flags()
	if len(names) != len(runFlags) {
		t.Errorf("every field set gives %d flags of %d: %v", len(names), len(runFlags), names)
	}
	args := " " + strings.Join(all.Args(), " ") + " "
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("--%s twice in the table", n)
		}
		seen[n] = true
		if c := strings.Count(args, " --"+n+" ") + strings.Count(args, " --"+n+"="); c != 1 {
			t.Errorf("--%s %d times in %q", n, c, args)
		}
	}
}
