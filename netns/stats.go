package netns

import (
	"encoding/binary"
	"fmt"
)

// LinkStats are a netdev's kernel counters (struct rtnl_link_stats64).
type LinkStats struct {
	RxPackets, TxPackets, RxBytes, TxBytes   uint64
	RxErrors, TxErrors, RxDropped, TxDropped uint64
}

// Stats reads the counters of interface name (IFLA_STATS64).
func (n *NS) Stats(name string) (LinkStats, error) {
	var st LinkStats
	_, b, err := n.getLink(name)
	if err != nil {
		return st, err
	}
	if b == nil {
		return st, fmt.Errorf("read the counters of link %q in %s: the kernel gave no IFLA_STATS64", name, n)
	}
	f := []*uint64{&st.RxPackets, &st.TxPackets, &st.RxBytes, &st.TxBytes,
		&st.RxErrors, &st.TxErrors, &st.RxDropped, &st.TxDropped}
	for i, p := range f {
		if len(b) >= (i+1)*8 {
			*p = binary.NativeEndian.Uint64(b[i*8:])
		}
	}
	return st, nil
}

// Macvtaps lists the macvtap devices stacked on interface lower, both in
// this namespace. It changes nothing, so it suits scrapes.
func (n *NS) Macvtaps(lower string) ([]string, error) {
	links, err := n.Links()
	if err != nil {
		return nil, err
	}
	parent := -1
	if l := LinkNamed(links, lower); l != nil {
		parent = l.Index
	}
	var names []string
	for _, l := range links {
		if l.Kind == "macvtap" && !l.ParentElsewhere && l.Parent == parent {
			names = append(names, l.Name)
		}
	}
	return names, nil
}
