package forwarder

import (
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/napi"
)

// Switch is a three-way `tapfwd run` setting (--napi, --vnet-hdr,
// --nic-gro).
type Switch string

// Switch values; "" leaves tapfwd's default (auto).
const (
	Auto Switch = "auto"
	On   Switch = "on"
	Off  Switch = "off"
)

// Poll is how tapfwd's workers wait (--poll).
type Poll string

// Poll values; "" leaves tapfwd's default (block).
const (
	Block    Poll = "block"    // sleep in ppoll until a fd is ready
	Busy     Poll = "busy"     // spin on non-blocking reads
	Kernel   Poll = "kernel"   // xdp: the kernel busy-polls the NIC queue's NAPI while the worker waits
	Threaded Poll = "threaded" // block, with the NIC's NAPI threaded
)

// Backend is the kind of socket on the NIC (--nic-backend).
type Backend string

// Backend values; "" leaves tapfwd's default (packet).
const (
	Packet Backend = "packet"
	XDP    Backend = "xdp"
)

// Options are the `tapfwd run` settings the benches vary. The zero value
// of each field leaves tapfwd's default: the flag is not given.
type Options struct {
	Queues  int    // --queues (0: tapfwd's default, 1)
	NAPI    Switch // --napi: IFF_NAPI on the TAP
	VnetHdr Switch // --vnet-hdr: IFF_VNET_HDR on the TAP
	Poll    Poll   // --poll
	// NICBackend is the sockets on the NIC (--nic-backend).
	NICBackend Backend
	// NICGRO is the NIC's GRO while tapfwd runs (--nic-gro: On, Off, or
	// Auto, the NIC as it is); empty leaves tapfwd's default, auto.
	// Binaries without the flag skip the configuration.
	NICGRO Switch
	// TAPNAPIThreaded runs the TAP's NAPI poll in a kthread
	// (--tap-napi-threaded).
	TAPNAPIThreaded bool
	// TAPNAPICPU, when set, pins the TAP's NAPI kthreads to a CPU
	// (--tap-napi-cpu); it needs TAPNAPIThreaded.
	TAPNAPICPU *int
	// TAPGROFlushTimeout is the TAP's gro_flush_timeout
	// (--tap-gro-flush-timeout); 0 leaves the kernel's.
	TAPGROFlushTimeout time.Duration
	// TAPNAPIDeferHardIRQs is the TAP's napi_defer_hard_irqs
	// (--tap-napi-defer-hard-irqs); 0 leaves the kernel's.
	TAPNAPIDeferHardIRQs int
	// NICNAPIThreaded sets the NIC's NAPI instances threaded
	// (--nic-napi-threaded); ThreadedDisabled leaves them.
	NICNAPIThreaded napi.Threaded
	// NICNAPICPU, when set, pins the NIC's NAPI kthreads to a CPU
	// (--nic-napi-cpu); it needs NICNAPIThreaded.
	NICNAPICPU *int
	// BusyPollCPU, when set, moves Poll Kernel's busy poll onto a thread
	// pinned to this CPU (--busy-poll-cpu).
	BusyPollCPU *int
	// NoGRO turns tapfwd's userspace GRO off (--gro=false).
	NoGRO bool
	// GROWindow is how long userspace GRO may wait for more frames of a
	// batch before it writes what it merged (--gro-window); 0 leaves
	// tapfwd's default. Binaries without the flag skip the configuration
	// (Flags, Supported).
	GROWindow time.Duration
	// Batch is the most frames moved per direction per wake-up
	// (--batch); 0 leaves tapfwd's default.
	Batch int
	// CPUs are the workers' CPUs (--cpus: a list, or "none" to pin
	// none); empty leaves tapfwd's default (queue i on the i-th CPU it
	// may use).
	CPUs string
	// Spin is the longest a worker spins before it sleeps (--spin); 0
	// leaves tapfwd's default. Binaries without the flag skip the
	// configuration.
	Spin time.Duration
	// Split runs a worker per direction (--split-directions). Binaries
	// without the flag skip the configuration.
	Split bool
	// FollowLoad is --follow-load's value, "true" or "false"; empty
	// leaves tapfwd's default. Binaries without the flag skip the
	// configuration.
	FollowLoad string
	// TAPIO is how the workers read and write the TAP (--tap-io:
	// "syscall", a system call per frame, "uring", a batch per
	// io_uring_enter, or "auto");
	// empty leaves tapfwd's default. Binaries without the flag skip the
	// configuration.
	TAPIO string
	// PProf serves Go's profiler beside the metrics (--pprof), at
	// MetricsAddr in the bed's fwd namespace (--metrics-addr).
	PProf bool
	// ABControl turns on tapfwd's hidden in-run A/B mode (--ab-control):
	// the FIFO the bench made (mkfifo) and holds open for writing, one
	// control byte per switch (bit 0: TAP queue 0 or 1; bit 1: the
	// delay). The TAP then gets two queues and tapfwd one worker.
	ABControl string
	// ABNAPI is IFF_NAPI on TAP queue 0 (arm A) and queue 1 (arm B)
	// (--ab-napi, On or Off each); empty leaves tapfwd's default, off,on.
	ABNAPI [2]Switch
	// ABDelay is how long each frame waits while the delay bit is set
	// (--ab-delay); 0 leaves tapfwd's default, 10µs.
	ABDelay time.Duration
}

// MetricsAddr is where a tapfwd started with Options.PProf serves its
// metrics and profiler, in the namespace it runs in.
const MetricsAddr = "127.0.0.1:9310"

// CPU returns a pointer to n, for Options.NICNAPICPU, TAPNAPICPU and
// BusyPollCPU.
func CPU(n int) *int { return &n }

// Needs are the TUNGETFEATURES bits (unix.IFF_*) tapfwd cannot run o
// without: what o asks for outright rather than when offered.
func (o Options) Needs() uint32 {
	var n uint32
	if o.NAPI == On {
		n |= unix.IFF_NAPI
	}
	if o.VnetHdr == On {
		n |= unix.IFF_VNET_HDR
	}
	if o.Queues > 1 || o.ABControl != "" {
		n |= unix.IFF_MULTI_QUEUE
	}
	if o.ABControl != "" && (o.ABNAPI == [2]Switch{} || o.ABNAPI[0] == On || o.ABNAPI[1] == On) {
		n |= unix.IFF_NAPI
	}
	return n
}

// Micros writes d in whole microseconds when it is one ("20us"; plain
// ASCII, unlike Duration.String's "20µs").
func Micros(d time.Duration) string {
	if d%time.Microsecond == 0 {
		return strconv.FormatInt(d.Microseconds(), 10) + "us"
	}
	return d.String()
}
