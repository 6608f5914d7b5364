package daemon

import (
	"github.com/tapfwd/tapfwd/vhostuser"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/tapfwd/tapfwd/afxdp"
	"github.com/tapfwd/tapfwd/forward"
	"github.com/tapfwd/tapfwd/napi"
	"github.com/tapfwd/tapfwd/tap"
)

// Config is what one forwarder is made of, part by part. A zero part (a
// nil pointer) is left out or takes the defaults its fields give. Each
// setting is documented here, once, with its unit, range and default
// (tapfwd run's flags say the same or point here); Validate applies the
// rules that need no system state.
type Config struct {
	// TAP is the TAP device (tap.Open). Name: at most 15 bytes (IFNAMSIZ
	// less one), not the NIC's; empty lets the kernel pick tapN. Queues:
	// 1 to MaxQueues, one worker each; 0: 1. MTU: tap.MinMTU to
	// tap.MaxMTU bytes; 0 takes the NIC's. MAC: unicast, not all zeros;
	// nil derives one from the name, namespace and machine id. Persist
	// needs a Name. NAPISettings need NAPI auto or on (with AB, an arm
	// with IFF_NAPI).
	TAP tap.Config
	// NIC is the wire side.
	NIC NIC
	// Workers are the forwarder's workers.
	Workers Workers
	// NAPI tunes the kernel's NAPI polling; nil leaves it alone.
	NAPI *NAPI
	// VMPorts are the VM ports made (or adopted) at the start.
	VMPorts VMPorts
	// Host gives the lab host a port of its own on the TAP; nil: the lab
	// address (TAP.Addr) is on the TAP.
	Host *HostPort
	// Metrics serves /metrics and /status; nil: none.
	Metrics *Metrics
	// Privileges are dropped once every fd is open.
	Privileges Privileges
	// Log is where the daemon reports.
	Log Log
	// Notify tells whoever started the daemon that it runs.
	Notify Notify
	// AB is the bench's in-run A/B mode; nil: off.
	AB *AB
}

// AB is the bench's in-run A/B mode (package abtap): the one worker reads
// and writes two queues of the TAP, queue 0 (arm A) and queue 1 (arm B),
// each with its own IFF_NAPI, and writes what comes from the NIC to the
// queue a controller picks, byte by byte, through a FIFO. It needs one
// queue (TAP.Queues 1: the TAP gets two, the NIC one socket), a system
// call per frame (TAPIOSyscall), no VM ports and no persistent TAP.
// TAP.NAPI is unused; TAP.NAPISettings act on the arms with IFF_NAPI.
type AB struct {
	// Control is the FIFO the controller made and holds open for
	// writing: abtap.Arm bytes.
	Control string
	// NAPI is IFF_NAPI on queue 0 and queue 1.
	NAPI [2]bool
	// Delay is how long an arm with abtap.ArmDelay busy-waits before each
	// frame's write, for every 1,500 bytes of it or part of them; 0 or
	// more (0: no wait).
	Delay time.Duration
}

// NIC is the wire: the sockets on it, one per queue.
type NIC struct {
	// Name is the NIC (or veth) in this network namespace; required, at
	// most 15 bytes.
	Name string
	// Promisc puts the NIC in promiscuous mode instead of asking it for
	// the lab's MACs and all multicast.
	Promisc bool
	// Wait, when the NIC is removed, waits for it to come back and gives
	// the workers new sockets instead of ending Run with
	// forward.ErrNICGone. It needs CAP_NET_RAW throughout (no
	// Privileges.User), and leaves the vhost-user ports' senders as they
	// are (no VMPorts.VhostDir).
	Wait bool
	// Backend is the kind of socket the queue workers use on the NIC.
	Backend Backend
	// XDPMode is how BackendXDP attaches its XDP program.
	XDPMode afxdp.Mode
	// GRO is the NIC's generic receive offload (ethtool -k's
	// generic-receive-offload) while tapfwd runs: ToggleAuto (the default)
	// leaves it as it is; ToggleOn turns it on, so that the kernel merges
	// a flow's segments before the workers read them (a veth merges only
	// frames from a peer that does not segment them itself, TSO off, and
	// UDP only with rx-udp-gro-forwarding, and gets NAPI instances with
	// GRO on); ToggleOff turns it off. What the NIC had is journalled in
	// FeatureJournalDir before the change and put back at Close, or by the
	// next run on the NIC, or Down, when tapfwd was killed; a NIC made
	// again while tapfwd waits for it (Wait) is set too. Putting it back
	// needs CAP_NET_ADMIN at Close: not with Privileges.User.
	GRO Toggle
}

// Workers are the forwarder's workers: one per TAP queue, then one per
// vhost-user port.
type Workers struct {
	// CPUs pins worker i to CPUs[i % len(CPUs)] (CPU numbers, 0 to
	// cpulist.Max-1): nil takes the CPUs this process may run on, in
	// order; an empty non-nil list pins none.
	CPUs []int
	// FollowLoad lets each pinned queue worker move among those CPUs (less
	// the busy poller's, KernelPoll.OwnCPU) to follow its load: while its
	// queue is busy and its CPU has no idle time left, it moves to one of
	// them that has (forward.Config.Roam). Off, queue i stays on the CPU it
	// was given. tapfwd run's default: DefaultFollowLoad.
	FollowLoad bool
	// Split runs each queue as two workers, one per direction: the one
	// that reads the NIC on the queue's CPU, the one that reads the TAP
	// on the next CPU of CPUs, wrapping (forward.Config.Split). It needs
	// BackendPacket and TAPIOSyscall (their reads and writes can run at
	// once); split queues do not follow their load.
	Split bool
	// Batch is the most frames moved per direction per wake-up, 1 to
	// MaxBatch; 0: forward.DefaultBatch. Each queue takes two batches of
	// 64 KiB frame buffers, at most MaxFrameBuffers bytes in all.
	Batch int
	// Poll is how the workers wait for frames; PollKernel needs
	// BackendXDP, and neither it nor PollThreaded (whose NIC NAPI
	// settings are restored at Close) takes a Privileges.User.
	Poll Poll
	// KernelPoll tunes PollKernel (and nothing else); the zero value
	// defers nothing and busy-polls for DefaultBusyPoll.
	KernelPoll KernelPoll
	// GRO merges TCP segments (and UDP datagrams, when the TAP takes USO)
	// of a flow from the NIC into one GSO frame per TAP write.
	GRO bool
	// StrictMAC drops frames from the TAP whose source is not the lab's
	// MAC (the host port's with Host, else the TAP's) or a macvtap VM
	// port's, and takes from the NIC only frames to the TAP's, the host
	// port's and the VM ports' MACs, broadcast and multicast. (A vhost-user
	// port's guest may send from its own MAC only, StrictMAC or not.)
	StrictMAC bool
	// L2 is what frames from the TAP side may carry onto the wire.
	L2 forward.L2Policy
	// TAPIO is how the queue workers read and write the TAP.
	TAPIO TAPIO
	// GROWindow is forward.Config.GROWindow: 0 (the default, never
	// waits) to MaxGROWindow; it needs GRO.
	GROWindow time.Duration
	// Spin is forward.Config.SpinMax, the longest a queue worker spins
	// before it sleeps, adapted to how soon frames come after a sleep
	// began (none while idle): 0 (never spins) to MaxSpin. With PollBusy
	// the workers spin without limit: it needs PollBlock.
	Spin time.Duration
}

// KernelPoll is what PollKernel sets on each NIC NAPI instance it
// busy-polls (netdev napi-set), while the sockets are open; the previous
// values are put back when they close.
type KernelPoll struct {
	// DeferHardIRQs is how many polls that find nothing the NAPI stays
	// masked for (defer-hard-irqs), 0 to MaxNICDeferHardIRQs polls: a
	// veth's peer then only queues its frames instead of running the NAPI
	// in its own softirq, and the worker's busy poll takes them. It needs
	// GROFlushTimeout. tapfwd run's default: DefaultNICDeferHardIRQs.
	DeferHardIRQs uint32
	// GROFlushTimeout is the timer (gro-flush-timeout) that polls a masked
	// NAPI when no busy poll came: the longest a frame waits while the
	// worker is busy elsewhere; 0 to MaxNICGROFlushTimeout. tapfwd run's
	// default: DefaultNICGROFlushTimeout.
	GROFlushTimeout time.Duration
	// BusyPoll is how long each wait of a worker busy-polls its queue's
	// NAPI before it sleeps (io_uring's busy-poll timeout), MinBusyPoll
	// to MaxBusyPoll; 0: DefaultBusyPoll.
	BusyPoll time.Duration
	// OwnCPU moves the busy poll onto a thread of its own pinned to CPU
	// (0 to cpulist.Max-1), which busy-polls every queue's NAPI without
	// pause while the workers sleep in ppoll (BusyPoll is then unused).
	OwnCPU bool
	CPU    int
}

// TAPIO is how the queue workers read and write the TAP.
type TAPIO int

const (
	// TAPIOSyscall is a read() or write() per frame (tap.Queue).
	TAPIOSyscall TAPIO = iota
	// TAPIOURing batches each worker's reads and writes through an
	// io_uring of its own (tap.URingQueue); Open fails where io_uring
	// cannot (tap.ErrNoURing).
	TAPIOURing
	// TAPIOAuto is TAPIOURing where io_uring works, else TAPIOSyscall,
	// said in one log line.
	TAPIOAuto
)

// NAPI tunes NAPI polling; each setting is left alone unless given.
type NAPI struct {
	// TAPCPU pins the TAP's NAPI kthreads to this CPU (0 to
	// cpulist.Max-1; it needs TAP.NAPISettings.Threaded); -1 leaves them.
	TAPCPU int
	// NICMode makes the NIC's NAPI instances threaded, restored at Close
	// (which needs CAP_NET_ADMIN: no Privileges.User);
	// napi.ThreadedDisabled leaves them.
	NICMode napi.Threaded
	// NICCPU pins the NIC's NAPI kthreads (0 to cpulist.Max-1; it needs
	// NICMode); -1 leaves them.
	NICCPU int
}

// MaxVMPorts is the most VM ports one TAP takes.
const MaxVMPorts = 64

// The limits of the settings and the defaults that are not a zero value:
// Validate and tapfwd run's flags take them from here.
const (
	// MaxQueues is the most TAP queues (TAP.Queues).
	MaxQueues = 256
	// MaxBatch is the largest Workers.Batch, in frames.
	MaxBatch = 1024
	// MaxFrameBuffers caps the workers' frame buffers, in bytes: two
	// batches of 64 KiB frames per queue (forward.BufferBytes).
	MaxFrameBuffers = 4 << 30
	// MaxGROWindow caps Workers.GROWindow: a wait beyond it is latency,
	// not merging.
	MaxGROWindow = time.Millisecond
	// DefaultFollowLoad is tapfwd run's Workers.FollowLoad: on. On the
	// guard's rows it delivered 1.16, 1.11 and 1.25 times the fixed
	// worker's wire->lab (TCP, MTU frames, 64 B UDP), and within the
	// noise of it lab->wire and with four streams.
	DefaultFollowLoad = true
	// MaxSpin caps Workers.Spin: a frame later than that costs a sleep
	// whatever the worker does, so spinning longer only burns the CPU.
	MaxSpin = time.Millisecond
	// MaxNICDeferHardIRQs is napi-set's limit on KernelPoll.DeferHardIRQs.
	MaxNICDeferHardIRQs = 1<<31 - 1
	// MaxNICGROFlushTimeout caps KernelPoll.GROFlushTimeout: a masked
	// NAPI's frames wait up to that long when the worker does not
	// busy-poll.
	MaxNICGROFlushTimeout = 10 * time.Millisecond
	// DefaultNICDeferHardIRQs and DefaultNICGROFlushTimeout are the
	// deferral tapfwd run's --poll kernel sets unless told otherwise (the
	// kernel's own example for busy polling,
	// Documentation/networking/napi.rst).
	DefaultNICDeferHardIRQs   = 2
	DefaultNICGROFlushTimeout = 200 * time.Microsecond
	// DefaultBusyPoll is KernelPoll.BusyPoll's default: it covers one
	// DefaultNICGROFlushTimeout, so a frame that comes while the worker
	// busy-polls is taken by it.
	DefaultBusyPoll = 200 * time.Microsecond
	// MinBusyPoll and MaxBusyPoll bound KernelPoll.BusyPoll.
	MinBusyPoll = time.Microsecond
	MaxBusyPoll = 10 * time.Millisecond
	// MinStatsEvery is the shortest Log.StatsEvery.
	MinStatsEvery = time.Second
	// DefaultMetricsAddr is where tapfwd run serves /metrics and /status
	// unless told otherwise, and where tapfwd status asks.
	DefaultMetricsAddr = "127.0.0.1:9310"
)

// withDefaults is c with the defaults its zero settings stand for filled
// in: the one place Open applies them.
func (c Config) withDefaults() Config {
	if c.TAP.Queues == 0 {
		c.TAP.Queues = 1
	}
	if c.Workers.Batch == 0 {
		c.Workers.Batch = forward.DefaultBatch
	}
	if kp := &c.Workers.KernelPoll; kp.BusyPoll == 0 && !kp.OwnCPU {
		kp.BusyPoll = DefaultBusyPoll
	}
	return c
}

// VMPorts are the VM ports on the TAP: macvtaps in bridge mode, or
// vhost-user sockets. Ports this run made are removed at Close unless the
// TAP persists, which keeps them all.
type VMPorts struct {
	// N is how many (0 to MaxVMPorts); those a persistent TAP kept count.
	N int
	// Owner, USER[:GROUP] (names or numbers), owns the ports' device
	// nodes or sockets with mode 0660 (it needs N); empty: root, mode
	// 0600.
	Owner string
	// VhostDir, an absolute directory (made mode 0755 when missing),
	// makes them vhost-user sockets there, named after the TAP
	// (vhostuser.SocketPath; the TAP needs a name, and N ports); not with
	// NIC.Wait; empty: macvtaps.
	VhostDir string
	// Queues is how many queue pairs each vhost-user port offers (1 to
	// MaxVMPortQueues), each served by a worker of its own; 0: as
	// many as the TAP has queues.
	Queues int
}

// MaxVMPortQueues is the most queue pairs a vhost-user port offers.
const MaxVMPortQueues = vhostuser.MaxQueuePairs

// vhostQueues is how many queue pairs each vhost-user port offers.
func (v VMPorts) vhostQueues(tapQueues int) int {
	if v.Queues > 0 {
		return v.Queues
	}
	return min(max(tapQueues, 1), MaxVMPortQueues)
}

// HostPort is the lab host's own port on the TAP: a macvlan in bridge mode
// carrying the host's address, so that the host and the guests on VM
// ports reach each other. A persistent TAP keeps it.
type HostPort struct {
	// Addr is the host's address on it; zero: none.
	Addr netip.Prefix
	// DHCP, when set, runs a DHCP server (dnsmasq) on the port handing
	// out this range of Addr's subnet (dhcp.CheckRange; it needs Addr,
	// and a TAP name dnsmasq takes, dhcp.CheckInterface).
	DHCP *DHCPRange
}

// DHCPRange is the first and last address a DHCP server hands out.
type DHCPRange struct{ First, Last netip.Addr }

// Metrics is the HTTP listener of /metrics and /status.
type Metrics struct {
	// Addr is HOST:PORT to listen on (port 0: any free one); tapfwd
	// run's default is DefaultMetricsAddr.
	Addr string
	// Listener, when set, is served instead of binding Addr: a socket
	// bound by someone else, such as a service manager in another network
	// namespace (systemd's socket activation). Once Open has taken it, the
	// daemon closes it: at Close, or when Open fails.
	Listener net.Listener
	// PProf also serves Go's profiler under /debug/pprof/.
	PProf bool
}

// Privileges are what the daemon gives up once every fd is open.
type Privileges struct {
	// User, when set, is who it becomes: the user's uid and primary gid,
	// no supplementary groups, no capabilities, no_new_privs. VM ports
	// and sockets it can then no longer remove are left to a janitor
	// (package keeper).
	User string
}

// Log is how the daemon reports what it does.
type Log struct {
	// Logger gets every line; nil discards them.
	Logger *slog.Logger
	// StatsEvery logs each queue's rates this often, at least
	// MinStatsEvery; 0: never.
	StatsEvery time.Duration
}

// Notify is how the daemon tells a service manager (the sd_notify
// protocol: READY=1, STOPPING=1, WATCHDOG=1) or another launcher how it is
// doing.
type Notify struct {
	// Socket is the service manager's datagram socket (systemd's
	// NOTIFY_SOCKET; a leading @ names an abstract one); empty: none.
	Socket string
	// Watchdog is the service manager's watchdog interval: WATCHDOG=1 goes
	// out every half of it while no worker is stalled; 0: none.
	Watchdog time.Duration
	// ReadyFd is a file descriptor (a launcher's pipe) that gets a line
	// and is closed once every worker runs, above 0; 0: none (stdin
	// never is).
	ReadyFd int
}
