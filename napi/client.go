package napi

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoNAPI is returned by QueueNAPI for a queue no NAPI instance serves.
var ErrNoNAPI = errors.New("no NAPI instance serves the queue")

// Request flags.
const (
	requestDo   = netlink.Request
	requestDump = netlink.Request | netlink.Dump
	requestAck  = netlink.Request | netlink.Acknowledge
)

// Client talks to the netdev generic netlink family of one network
// namespace: the one the calling thread is in when Dial runs (a netlink
// socket stays in the namespace it was made in). It is safe for concurrent
// use.
type Client struct {
	c      *genetlink.Conn
	family uint16
	feat   Features
	kernel string
}

// Dial connects to the netdev family and probes its Features. On a kernel
// without NAPI support it returns a *FeatureError.
func Dial() (*Client, error) {
	conn, err := genetlink.Dial(&netlink.Config{Strict: true})
	if err != nil {
		return nil, fmt.Errorf("open a generic netlink socket: %w", err)
	}
	c := &Client{c: conn, kernel: kernelRelease()}
	f, err := conn.GetFamily(familyName)
	if err != nil {
		conn.Close()
		if errors.Is(err, os.ErrNotExist) {
			return nil, c.missing(featNetdev)
		}
		return nil, fmt.Errorf("look up the netdev generic netlink family: %w", err)
	}
	c.family = f.ID
	if err := c.probeFeatures(); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the netlink socket.
func (c *Client) Close() error { return c.c.Close() }

// Features reports what this kernel supports.
func (c *Client) Features() Features { return c.feat }

func (c *Client) execute(cmd uint8, data []byte, flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	return c.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: familyVersion},
		Data:   data,
	}, c.family, flags)
}

// List returns the NAPI instances of the device with index ifindex, or of
// every device in the namespace when ifindex is 0, ordered by ifindex and
// id. A device without NAPI instances (a veth with GRO off) has none.
func (c *Client) List(ifindex int) ([]NAPI, error) {
	out, err := dump(c, cmdNAPIGet, "napi-get", attrNAPIIfindex, ifindex, parseNAPI)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b NAPI) int {
		if a.Ifindex != b.Ifindex {
			return cmp.Compare(a.Ifindex, b.Ifindex)
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Get returns NAPI instance id. An id not in this namespace is an error
// matching os.ErrNotExist.
func (c *Client) Get(id uint32) (NAPI, error) {
	if !c.feat.NAPIGet {
		return NAPI{}, c.missing(featNAPIGet)
	}
	req, err := encodeU32s(attrNAPIID, id)
	if err != nil {
		return NAPI{}, err
	}
	msgs, err := c.execute(cmdNAPIGet, req, requestDo)
	if err != nil {
		return NAPI{}, c.idError("napi-get", id, err)
	}
	if len(msgs) != 1 {
		return NAPI{}, fmt.Errorf("napi-get %d: %d replies, want 1", id, len(msgs))
	}
	return parseNAPI(msgs[0].Data)
}

// Queues returns the queues of the device with index ifindex, or of every
// device when ifindex is 0.
func (c *Client) Queues(ifindex int) ([]Queue, error) {
	return dump(c, cmdQueueGet, "queue-get", attrQueueIfindex, ifindex, parseQueue)
}

// dump runs the dump request cmd (op in errors) for the device with index
// ifindex, named by attribute ifindexAttr, or for every device when
// ifindex is 0, and parses each reply with parse.
func dump[T any](c *Client, cmd uint8, op string, ifindexAttr uint32, ifindex int, parse func([]byte) (T, error)) ([]T, error) {
	if !c.feat.NAPIGet {
		return nil, c.missing(featNAPIGet)
	}
	var req []byte
	if ifindex != 0 {
		var err error
		if req, err = encodeU32s(ifindexAttr, uint32(ifindex)); err != nil {
			return nil, err
		}
	}
	msgs, err := c.execute(cmd, req, requestDump)
	if err != nil {
		return nil, c.opError(op+" dump", err)
	}
	out := make([]T, 0, len(msgs))
	for _, m := range msgs {
		v, err := parse(m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// QueueNAPI returns the id of the NAPI instance that serves queue number
// queue of direction typ on the device with index ifindex. A queue without
// one gives an error matching ErrNoNAPI: veth queues have none even when the
// veth has NAPI instances (use List(ifindex) there).
func (c *Client) QueueNAPI(ifindex, queue int, typ QueueType) (uint32, error) {
	if !c.feat.NAPIGet {
		return 0, c.missing(featNAPIGet)
	}
	req, err := encodeU32s(attrQueueIfindex, uint32(ifindex), attrQueueType, uint32(typ), attrQueueID, uint32(queue))
	if err != nil {
		return 0, err
	}
	msgs, err := c.execute(cmdQueueGet, req, requestDo)
	if err != nil {
		return 0, c.opError(fmt.Sprintf("queue-get %s queue %d of ifindex %d", typ, queue, ifindex), err)
	}
	if len(msgs) != 1 {
		return 0, fmt.Errorf("queue-get: %d replies, want 1", len(msgs))
	}
	q, err := parseQueue(msgs[0].Data)
	if err != nil {
		return 0, err
	}
	if q.NAPIID == 0 {
		return 0, fmt.Errorf("%s queue %d of ifindex %d: %w", typ, queue, ifindex, ErrNoNAPI)
	}
	return q.NAPIID, nil
}

// Set changes the attributes a sets on NAPI instance id, and returns their
// previous values (the same fields set), so that Set(id, prev) undoes it;
// Changes does that bookkeeping. A mode this kernel lacks is refused with a
// *FeatureError before anything is changed. Setting threaded to enabled or
// busy-poll starts the kthread napi/<dev>-<id>, whose pid Get then reports;
// disabled stops it.
func (c *Client) Set(id uint32, a Attrs) (prev Attrs, err error) {
	if err := c.check(a); err != nil {
		return Attrs{}, err
	}
	if a.empty() {
		return Attrs{}, nil
	}
	req, err := encodeSet(id, a)
	if err != nil {
		return Attrs{}, err
	}
	cur, err := c.Get(id)
	if err != nil {
		return Attrs{}, err
	}
	if _, err := c.execute(cmdNAPISet, req, requestAck); err != nil {
		// Should the policy probe ever be wrong: 6.17 and 6.18 answer
		// threaded 2 with ERANGE (NLA_POLICY_MAX(NLA_U32, 1)).
		if a.Threaded != nil && *a.Threaded == ThreadedBusyPoll && errors.Is(err, unix.ERANGE) {
			return Attrs{}, c.missing(featBusyPoll)
		}
		return Attrs{}, c.idError("napi-set", id, err)
	}
	return a.from(cur), nil
}

// check refuses what this kernel cannot do.
func (c *Client) check(a Attrs) error {
	if a.Threaded != nil && *a.Threaded > ThreadedBusyPoll {
		return fmt.Errorf("unknown threaded mode %d: want 0 (disabled), 1 (enabled) or 2 (busy-poll)", uint32(*a.Threaded))
	}
	if a.empty() {
		return nil
	}
	switch {
	case !c.feat.NAPIGet:
		return c.missing(featNAPIGet)
	case !c.feat.NAPISet:
		return c.missing(featNAPISet)
	case a.Threaded == nil:
		return nil
	case !c.feat.Threaded:
		return c.missing(featThreaded)
	case *a.Threaded == ThreadedBusyPoll && !c.feat.BusyPoll:
		return c.missing(featBusyPoll)
	}
	return nil
}

// idError explains an error from a request about NAPI id.
func (c *Client) idError(op string, id uint32, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s %d: no such NAPI instance in this network namespace: %w", op, id, unix.ENOENT)
	}
	return c.opError(fmt.Sprintf("%s %d", op, id), err)
}

// opError turns a netlink error into one line that says what was being done,
// wraps the errno, and adds the kernel's extended ack message if any.
func (c *Client) opError(op string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", op, err)
	}
	hint := ""
	var oe *netlink.OpError
	if errors.As(err, &oe) && oe.Message != "" {
		hint = " (kernel: " + oe.Message + ")"
	}
	if errno == unix.EPERM || errno == unix.EACCES {
		// net/core/netdev-genl-gen.c: napi-set is GENL_ADMIN_PERM.
		hint += ": changing NAPI settings needs CAP_NET_ADMIN; run as root"
	}
	return fmt.Errorf("%s: %w%s", op, errno, hint)
}
