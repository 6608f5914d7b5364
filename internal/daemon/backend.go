package daemon

import "fmt"

// Backend is the kind of socket a queue worker has on the NIC.
type Backend uint8

const (
	// BackendPacket is an AF_PACKET socket with its mmapped rings
	// (package afpacket), fanned out over the queues.
	BackendPacket Backend = iota
	// BackendXDP is an AF_XDP socket bound to NIC queue i (package
	// afxdp), fed by an XDP program the daemon attaches to the NIC.
	BackendXDP
)

var backendNames = []string{BackendPacket: "packet", BackendXDP: "xdp"}

func (b Backend) String() string { return backendNames[b] }

// MarshalText and UnmarshalText make a Backend a flag value.
func (b Backend) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

func (b *Backend) UnmarshalText(t []byte) error {
	return parseName(backendNames, string(t), (*uint8)(b), "want packet or xdp")
}

// Poll is how a worker waits for frames.
type Poll uint8

const (
	// PollBlock sleeps in ppoll until a fd is ready: interrupts and
	// wake-ups.
	PollBlock Poll = iota
	// PollBusy spins on non-blocking reads (tapfwd's own busy loop).
	PollBusy
	// PollKernel has the kernel busy-poll the NIC queue's NAPI while the
	// worker waits (BackendXDP only): through io_uring's NAPI busy
	// polling, which names the NAPI by its id, since a 6.18 veth gives
	// its XDP sockets NAPI id 0 and SO_BUSY_POLL then polls nothing.
	PollKernel
	// PollThreaded waits as PollBlock, with the NIC's NAPI instances
	// threaded (NAPI.NICMode enabled unless given).
	PollThreaded
)

var pollNames = []string{PollBlock: "block", PollBusy: "busy", PollKernel: "kernel", PollThreaded: "threaded"}

func (p Poll) String() string { return pollNames[p] }

// MarshalText and UnmarshalText make a Poll a flag value.
func (p Poll) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *Poll) UnmarshalText(t []byte) error {
	return parseName(pollNames, string(t), (*uint8)(p), "want block, busy, kernel or threaded")
}

// Toggle is a setting of the NIC's that tapfwd may change while it runs:
// left as it is, or turned on or off.
type Toggle uint8

const (
	// ToggleAuto leaves the setting as it is.
	ToggleAuto Toggle = iota
	// ToggleOn turns it on while tapfwd runs.
	ToggleOn
	// ToggleOff turns it off while tapfwd runs.
	ToggleOff
)

var toggleNames = []string{ToggleAuto: "auto", ToggleOn: "on", ToggleOff: "off"}

func (t Toggle) String() string { return toggleNames[t] }

// MarshalText and UnmarshalText make a Toggle a flag value.
func (t Toggle) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

func (t *Toggle) UnmarshalText(b []byte) error {
	return parseName(toggleNames, string(b), (*uint8)(t), "want auto, on or off")
}

// parseName sets *v to the index of name in names.
func parseName(names []string, name string, v *uint8, want string) error {
	for i, n := range names {
		if n == name {
			*v = uint8(i)
			return nil
		}
	}
	return fmt.Errorf("%s, got %q", want, name)
}
