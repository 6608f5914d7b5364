package napi

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/mdlayher/netlink"
)

// The netdev family's numbers, from include/uapi/linux/netdev.h (generated
// from Documentation/netlink/specs/netdev.yaml); unchanged in 6.18 and 6.19
// except that 6.19 lets threaded take the value 2 (busy-poll).
const (
	familyName    = "netdev"
	familyVersion = 1 // NETDEV_FAMILY_VERSION

	cmdQueueGet = 10 // NETDEV_CMD_QUEUE_GET, Linux 6.9
	cmdNAPIGet  = 11 // NETDEV_CMD_NAPI_GET, Linux 6.9
	cmdNAPISet  = 14 // NETDEV_CMD_NAPI_SET, Linux 6.13

	// enum netdev_napi: NETDEV_A_NAPI_*.
	attrNAPIIfindex           = 1
	attrNAPIID                = 2
	attrNAPIIRQ               = 3 // absent when the NAPI has no IRQ (veth)
	attrNAPIPID               = 4 // absent unless threaded
	attrNAPIDeferHardIRQs     = 5 // u32, max S32_MAX; 6.13
	attrNAPIGROFlushTimeout   = 6 // uint (4 or 8 bytes), ns; 6.13
	attrNAPIIRQSuspendTimeout = 7 // uint (4 or 8 bytes), ns; 6.13
	attrNAPIThreaded          = 8 // u32 enum netdev_napi_threaded; 6.17

	// enum netdev_queue: NETDEV_A_QUEUE_*.
	attrQueueID      = 1
	attrQueueIfindex = 2
	attrQueueType    = 3
	attrQueueNAPIID  = 4 // absent when no NAPI serves the queue
)

// Threaded is a NAPI instance's polling mode (enum netdev_napi_threaded).
type Threaded uint32

// Polling modes.
const (
	// ThreadedDisabled: the NAPI is polled in softirq context.
	ThreadedDisabled Threaded = 0
	// ThreadedEnabled: a kthread napi/<dev>-<id> polls it (Linux 6.17).
	ThreadedEnabled Threaded = 1
	// ThreadedBusyPoll: the kthread polls it continuously, keeping its CPU
	// 100% busy (Linux 6.19).
	ThreadedBusyPoll Threaded = 2
)

var threadedNames = [...]string{"disabled", "enabled", "busy-poll"}

func (t Threaded) String() string {
	if int(t) < len(threadedNames) {
		return threadedNames[t]
	}
	return "threaded(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// ParseThreaded parses "disabled", "enabled" or "busy-poll".
func ParseThreaded(s string) (Threaded, error) {
	for i, n := range threadedNames {
		if s == n {
			return Threaded(i), nil
		}
	}
	return 0, fmt.Errorf("threaded mode %q: want disabled, enabled or busy-poll", s)
}

// MarshalText implements encoding.TextMarshaler.
func (t Threaded) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Threaded) UnmarshalText(b []byte) error {
	v, err := ParseThreaded(string(b))
	if err == nil {
		*t = v
	}
	return err
}

// NAPI is one NAPI instance as napi-get reports it.
type NAPI struct {
	ID      uint32
	Ifindex int
	// IRQ is the interrupt the NAPI serves, -1 when it has none (veth).
	IRQ int
	// PID is the polling kthread's pid, 0 when the NAPI is not threaded.
	PID      int
	Threaded Threaded
	// DeferHardIRQs is the number of empty polls before hard IRQs are
	// re-enabled; 0: never deferred.
	DeferHardIRQs uint32
	// GROFlushTimeout arms a timer instead of flushing GRO at the end of a
	// poll; 0: flush at once.
	GROFlushTimeout time.Duration
	// IRQSuspendTimeout is how long IRQs stay suspended while epoll busy
	// polling finds events; 0: off.
	IRQSuspendTimeout time.Duration
}

// QueueType is a queue's direction (enum netdev_queue_type).
type QueueType uint32

// Queue directions.
const (
	QueueRX QueueType = 0
	QueueTX QueueType = 1
)

func (t QueueType) String() string {
	switch t {
	case QueueRX:
		return "rx"
	case QueueTX:
		return "tx"
	}
	return "queue-type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// Queue is one device queue as queue-get reports it.
type Queue struct {
	ID      int
	Ifindex int
	Type    QueueType
	// NAPIID is the NAPI serving the queue, 0 when none does (veth queues
	// report none even when the veth has NAPI instances).
	NAPIID uint32
}

// Attrs are the settable attributes of a NAPI instance. Nil fields are left
// as they are. Go 1.26's new(expr) makes them short:
// Attrs{Threaded: new(ThreadedEnabled)}.
type Attrs struct {
	Threaded          *Threaded
	DeferHardIRQs     *uint32        // at most 2^31-1
	GROFlushTimeout   *time.Duration // nanosecond resolution, not negative
	IRQSuspendTimeout *time.Duration // nanosecond resolution, not negative
}

// empty reports whether a sets nothing.
func (a Attrs) empty() bool {
	return a.Threaded == nil && a.DeferHardIRQs == nil && a.GROFlushTimeout == nil && a.IRQSuspendTimeout == nil
}

// from returns the values n has for the fields a sets.
func (a Attrs) from(n NAPI) Attrs {
	var p Attrs
	if a.Threaded != nil {
		p.Threaded = new(n.Threaded)
	}
	if a.DeferHardIRQs != nil {
		p.DeferHardIRQs = new(n.DeferHardIRQs)
	}
	if a.GROFlushTimeout != nil {
		p.GROFlushTimeout = new(n.GROFlushTimeout)
	}
	if a.IRQSuspendTimeout != nil {
		p.IRQSuspendTimeout = new(n.IRQSuspendTimeout)
	}
	return p
}

// maxDeferHardIRQs is the napi-set policy's limit
// (net/core/netdev-genl-gen.c: netdev_a_napi_defer_hard_irqs_range).
const maxDeferHardIRQs = 1<<31 - 1

// encodeSet builds the attributes of a napi-set request.
func encodeSet(id uint32, a Attrs) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(attrNAPIID, id)
	if a.DeferHardIRQs != nil {
		if *a.DeferHardIRQs > maxDeferHardIRQs {
			return nil, fmt.Errorf("defer-hard-irqs %d: at most %d", *a.DeferHardIRQs, maxDeferHardIRQs)
		}
		ae.Uint32(attrNAPIDeferHardIRQs, *a.DeferHardIRQs)
	}
	// Both timeouts are NLA_UINT: the kernel takes 4 or 8 bytes; send 8.
	if a.GROFlushTimeout != nil {
		if *a.GROFlushTimeout < 0 {
			return nil, fmt.Errorf("gro-flush-timeout %v is negative", *a.GROFlushTimeout)
		}
		ae.Uint64(attrNAPIGROFlushTimeout, uint64(*a.GROFlushTimeout))
	}
	if a.IRQSuspendTimeout != nil {
		if *a.IRQSuspendTimeout < 0 {
			return nil, fmt.Errorf("irq-suspend-timeout %v is negative", *a.IRQSuspendTimeout)
		}
		ae.Uint64(attrNAPIIRQSuspendTimeout, uint64(*a.IRQSuspendTimeout))
	}
	if a.Threaded != nil {
		ae.Uint32(attrNAPIThreaded, uint32(*a.Threaded))
	}
	return ae.Encode()
}

// encodeU32s builds attributes holding u32 values, in the order given.
func encodeU32s(kv ...uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	for i := 0; i+1 < len(kv); i += 2 {
		ae.Uint32(uint16(kv[i]), kv[i+1])
	}
	return ae.Encode()
}

// walk calls fn for each attribute in b, with the nested and byte-order
// flags masked off the type.
func walk(b []byte, fn func(typ uint16, data []byte) error) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	for ad.Next() {
		if err := fn(ad.Type(), ad.Bytes()); err != nil {
			return err
		}
	}
	return ad.Err()
}

// uintAttr decodes an integer attribute. The kernel sends NLA_UINT values
// (the timeouts) in 4 bytes when they fit and 8 otherwise
// (include/net/netlink.h: nla_put_uint), and a later kernel may widen other
// fields the same way, so every integer is read either way.
func uintAttr(typ uint16, b []byte) (uint64, error) {
	switch len(b) {
	case 4:
		return uint64(binary.NativeEndian.Uint32(b)), nil
	case 8:
		return binary.NativeEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("netdev attribute %d: integer of %d bytes, want 4 or 8", typ, len(b))
}

// walkUints reads each attribute of b that has a setter in set as an
// integer (uintAttr) and hands it to that setter; other attributes (newer
// kernels add them) are skipped.
func walkUints(b []byte, set map[uint16]func(v uint64)) error {
	return walk(b, func(typ uint16, data []byte) error {
		fn, ok := set[typ]
		if !ok {
			return nil
		}
		v, err := uintAttr(typ, data)
		if err != nil {
			return err
		}
		fn(v)
		return nil
	})
}

// parseNAPI decodes the attributes of a napi-get reply. Attributes it does
// not know (newer kernels add them) are ignored.
func parseNAPI(b []byte) (NAPI, error) {
	n := NAPI{IRQ: -1}
	err := walkUints(b, map[uint16]func(uint64){
		attrNAPIIfindex:           func(v uint64) { n.Ifindex = int(v) },
		attrNAPIID:                func(v uint64) { n.ID = uint32(v) },
		attrNAPIIRQ:               func(v uint64) { n.IRQ = int(v) },
		attrNAPIPID:               func(v uint64) { n.PID = int(v) },
		attrNAPIDeferHardIRQs:     func(v uint64) { n.DeferHardIRQs = uint32(v) },
		attrNAPIGROFlushTimeout:   func(v uint64) { n.GROFlushTimeout = time.Duration(v) },
		attrNAPIIRQSuspendTimeout: func(v uint64) { n.IRQSuspendTimeout = time.Duration(v) },
		attrNAPIThreaded:          func(v uint64) { n.Threaded = Threaded(v) },
	})
	if err == nil && n.ID == 0 {
		err = fmt.Errorf("napi-get reply without an id")
	}
	return n, err
}

// parseQueue decodes the attributes of a queue-get reply, ignoring unknown
// ones (the xsk, dmabuf and io_uring attributes among them).
func parseQueue(b []byte) (Queue, error) {
	var q Queue
	seen := false
	err := walkUints(b, map[uint16]func(uint64){
		attrQueueID:      func(v uint64) { q.ID, seen = int(v), true },
		attrQueueIfindex: func(v uint64) { q.Ifindex = int(v) },
		attrQueueType:    func(v uint64) { q.Type = QueueType(v) },
		attrQueueNAPIID:  func(v uint64) { q.NAPIID = uint32(v) },
	})
	if err == nil && (!seen || q.Ifindex == 0) {
		err = fmt.Errorf("queue-get reply without a queue id or ifindex")
	}
	return q, err
}
