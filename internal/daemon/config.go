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
// nil pointer) is left out or takes the defaults its fields give.
type Config struct {
	// TAP is the TAP device (tap.Open); an MTU of 0 takes the NIC's.
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
	// frame's write.
	Delay time.Duration
}

// NIC is the wire: the sockets on it, one per queue.
type NIC struct {
	// Name is the NIC (or veth) in this network namespace.
	Name string
	// Promisc puts the NIC in promiscuous mode instead of asking it for
	// the lab's MACs and all multicast.
	Promisc bool
	// Wait, when the NIC is removed, waits for it to come back and gives
	// the workers new sockets instead of ending Run with
	// forward.ErrNICGone. It needs CAP_NET_RAW throughout, and leaves the
	// vhost-user ports' senders as they are.
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
	// CPUs pins worker i to CPUs[i % len(CPUs)]: nil takes the CPUs this
	// process may run on, in order; an empty non-nil list pins none.
	CPUs []int
	// Batch is the most frames moved per direction per wake-up; 0: 64.
	Batch int
	// Poll is how the workers wait for frames.
	Poll Poll
	// KernelPoll tunes PollKernel; the zero value defers nothing.
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
	// GROWindow, with GRO, is how long a worker that read less than a
	// batch from the NIC may wait for more segments to merge
	// (forward.Config.GROWindow); 0 never waits.
	GROWindow time.Duration
}

// KernelPoll is what PollKernel sets on each NIC NAPI instance it
// busy-polls (netdev napi-set), while the sockets are open; the previous
// values are put back when they close.
type KernelPoll struct {
	// DeferHardIRQs is how many polls that find nothing the NAPI stays
	// masked for (defer-hard-irqs): a veth's peer then only queues its
	// frames instead of running the NAPI in its own softirq, and the
	// worker's busy poll takes them. It needs GROFlushTimeout.
	DeferHardIRQs uint32
	// GROFlushTimeout is the timer (gro-flush-timeout) that polls a masked
	// NAPI when no busy poll came: the longest a frame waits while the
	// worker is busy elsewhere.
	GROFlushTimeout time.Duration
	// BusyPoll is how long each wait of a worker busy-polls its queue's
	// NAPI before it sleeps; 0: 50µs.
	BusyPoll time.Duration
	// OwnCPU moves the busy poll onto a thread of its own pinned to CPU,
	// which busy-polls every queue's NAPI without pause while the workers
	// sleep in ppoll (BusyPoll is then unused).
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
	// TAPCPU pins the TAP's NAPI kthreads (TAP.NAPISettings.Threaded) to
	// this CPU; -1 leaves them.
	TAPCPU int
	// NICMode makes the NIC's NAPI instances threaded, restored at
	// Close; napi.ThreadedDisabled leaves them.
	NICMode napi.Threaded
	// NICCPU pins the NIC's NAPI kthreads (with NICMode); -1 leaves them.
	NICCPU int
}

// MaxVMPorts is the most VM ports one TAP takes.
const MaxVMPorts = 64

// VMPorts are the VM ports on the TAP: macvtaps in bridge mode, or
// vhost-user sockets. Ports this run made are removed at Close unless the
// TAP persists, which keeps them all.
type VMPorts struct {
	// N is how many (0 to MaxVMPorts); those a persistent TAP kept count.
	N int
	// Owner, USER[:GROUP] (names or numbers), owns the ports' device
	// nodes or sockets with mode 0660; empty: root, mode 0600.
	Owner string
	// VhostDir, an absolute directory (made mode 0755 when missing),
	// makes them vhost-user sockets there, named after the TAP
	// (vhostuser.SocketPath; the TAP needs a name); empty: macvtaps.
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
	// out this range of Addr's subnet (dhcp.CheckRange).
	DHCP *DHCPRange
}

// DHCPRange is the first and last address a DHCP server hands out.
type DHCPRange struct{ First, Last netip.Addr }

// Metrics is the HTTP listener of /metrics and /status.
type Metrics struct {
	// Addr is HOST:PORT to listen on (port 0: any free one).
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
	// StatsEvery logs each queue's rates this often; 0: never.
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
	// and is closed once every worker runs; 0: none (stdin never is).
	ReadyFd int
}
