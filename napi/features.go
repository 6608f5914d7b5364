package napi

import (
	"errors"
	"fmt"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Features says which parts of NAPI control this kernel has. Client probes
// them once, from the netdev family's own policies (CTRL_CMD_GETPOLICY), so
// an unsupported request is refused with a FeatureError before it is sent.
type Features struct {
	// NAPIGet: napi-get and queue-get (Linux 6.9).
	NAPIGet bool
	// NAPISet: napi-set with defer-hard-irqs, gro-flush-timeout and
	// irq-suspend-timeout (Linux 6.13).
	NAPISet bool
	// Threaded: per-NAPI threaded polling through napi-set (Linux 6.17).
	Threaded bool
	// BusyPoll: threaded busy-poll (Linux 6.19); 6.18 refuses it with
	// ERANGE.
	BusyPoll bool
}

// Features a FeatureError names, with the first Linux version that has
// them.
var (
	featNetdev   = feature{"NAPI control through the netdev generic netlink family", "6.9"}
	featNAPIGet  = feature{"NAPI listing (netdev napi-get)", "6.9"}
	featNAPISet  = feature{"NAPI settings (netdev napi-set)", "6.13"}
	featThreaded = feature{"per-NAPI threaded polling (napi-set threaded)", "6.17"}
	featBusyPoll = feature{"threaded NAPI busy polling (threaded busy-poll)", "6.19"}
)

type feature struct{ name, since string }

// FeatureError says that the running kernel lacks a feature, and which
// Linux version first has it. It matches errors.ErrUnsupported.
type FeatureError struct {
	Feature string // what is missing, e.g. "threaded NAPI busy polling (threaded busy-poll)"
	Since   string // first Linux version that has it, e.g. "6.19"
	Kernel  string // release of the running kernel, as uname -r prints it
}

func (e *FeatureError) Error() string {
	return fmt.Sprintf("%s needs Linux %s or later; this kernel is %s", e.Feature, e.Since, e.Kernel)
}

// Is makes errors.Is(err, errors.ErrUnsupported) true.
func (e *FeatureError) Is(target error) bool { return target == errors.ErrUnsupported }

func (c *Client) missing(f feature) error {
	return &FeatureError{Feature: f.name, Since: f.since, Kernel: c.kernel}
}

// kernelRelease returns uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// policyAttr is one attribute of a netlink policy
// (include/uapi/linux/netlink.h: enum netlink_policy_type_attr).
type policyAttr struct {
	typ    uint32 // NL_ATTR_TYPE_*
	maxU   uint64 // NL_POLICY_TYPE_ATTR_MAX_VALUE_U
	hasMax bool
}

// probeFeatures reads the napi-get and napi-set policies.
func (c *Client) probeFeatures() error {
	get, ok, err := c.opPolicy(cmdNAPIGet)
	if err != nil {
		return err
	}
	c.feat.NAPIGet = ok && len(get) > 0
	set, ok, err := c.opPolicy(cmdNAPISet)
	if err != nil {
		return err
	}
	c.feat = featuresFrom(c.feat.NAPIGet, set, ok)
	return nil
}

// featuresFrom derives Features from napi-set's do policy (setOK false: the
// kernel has no napi-set).
func featuresFrom(get bool, set map[uint16]policyAttr, setOK bool) Features {
	f := Features{NAPIGet: get, NAPISet: setOK && len(set) > 0}
	if th, ok := set[attrNAPIThreaded]; ok && f.NAPISet {
		f.Threaded = true
		// net/core/netdev-genl-gen.c: NLA_POLICY_MAX(NLA_U32, 1) in 6.17
		// and 6.18, NLA_POLICY_MAX(NLA_U32, 2) from 6.19.
		f.BusyPoll = th.hasMax && th.maxU >= uint64(ThreadedBusyPoll)
	}
	return f
}

// opPolicy dumps the do policy of the netdev command cmd. ok is false when
// the kernel does not have the command.
func (c *Client) opPolicy(cmd uint8) (map[uint16]policyAttr, bool, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint16(unix.CTRL_ATTR_FAMILY_ID, c.family)
	ae.Uint32(unix.CTRL_ATTR_OP, uint32(cmd))
	data, err := ae.Encode()
	if err != nil {
		return nil, false, err
	}
	req := genetlink.Message{
		Header: genetlink.Header{Command: unix.CTRL_CMD_GETPOLICY, Version: 1},
		Data:   data,
	}
	msgs, err := c.c.Execute(req, unix.GENL_ID_CTRL, requestDump)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
		// net/netlink/genetlink.c: ctrl_dumppolicy_start: no such command.
		return nil, false, nil
	}
	if err != nil {
		return nil, false, c.opError(fmt.Sprintf("reading the policy of netdev command %d", cmd), err)
	}
	attrs, err := parsePolicy(msgs, cmd)
	return attrs, err == nil, err
}

// parsePolicy picks the do policy of cmd out of a CTRL_CMD_GETPOLICY dump.
// The dump maps the command to a policy index (CTRL_ATTR_OP_POLICY), and
// lists each policy's attributes (CTRL_ATTR_POLICY); see
// net/netlink/genetlink.c: ctrl_dumppolicy.
func parsePolicy(msgs []genetlink.Message, cmd uint8) (map[uint16]policyAttr, error) {
	doIdx := -1
	policies := map[uint32]map[uint16]policyAttr{}
	for _, m := range msgs {
		err := walk(m.Data, func(typ uint16, data []byte) error {
			switch typ {
			case unix.CTRL_ATTR_OP_POLICY:
				return walk(data, func(op uint16, data []byte) error {
					if op != uint16(cmd) {
						return nil
					}
					return walk(data, func(typ uint16, data []byte) error {
						if typ == unix.CTRL_ATTR_POLICY_DO {
							v, err := uintAttr(typ, data)
							doIdx = int(v)
							return err
						}
						return nil
					})
				})
			case unix.CTRL_ATTR_POLICY:
				return walk(data, func(idx uint16, data []byte) error {
					p := policies[uint32(idx)]
					if p == nil {
						p = map[uint16]policyAttr{}
						policies[uint32(idx)] = p
					}
					return walk(data, func(attr uint16, data []byte) error {
						var pa policyAttr
						err := walk(data, func(typ uint16, data []byte) error {
							switch typ {
							case unix.NL_POLICY_TYPE_ATTR_TYPE:
								v, err := uintAttr(typ, data)
								pa.typ = uint32(v)
								return err
							case unix.NL_POLICY_TYPE_ATTR_MAX_VALUE_U:
								v, err := uintAttr(typ, data)
								pa.maxU, pa.hasMax = v, true
								return err
							}
							return nil
						})
						p[attr] = pa
						return err
					})
				})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("decode the policy of netdev command %d: %w", cmd, err)
		}
	}
	if doIdx < 0 {
		// A command without a do policy (dump only) takes no attributes.
		return map[uint16]policyAttr{}, nil
	}
	return policies[uint32(doIdx)], nil
}
