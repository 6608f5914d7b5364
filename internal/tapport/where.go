package tapport

import (
	"os"

	"github.com/tapfwd/tapfwd/netns"
)

// Where names the network namespaces other than ns ("" for the caller's)
// where a TAP named tapName is or, for tapName "", where a TAP has VM
// ports: what a command that found none in ns tells its user to look at.
// A name is one under netns.Dir, or "" for the caller's namespace. It
// reads the namespaces, changes nothing, and leaves out those it cannot
// read: it gives hints, not answers.
func Where(ns, tapName string) []string {
	asked, err := netns.Label(ns)
	if err != nil {
		asked = ns
	}
	names := []string{""}
	if ents, err := os.ReadDir(netns.Dir); err == nil {
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	var out []string
	for _, name := range names {
		if label, err := netns.Label(name); err == nil && label != asked && hasTAP(name, tapName) {
			out = append(out, name)
		}
	}
	return out
}

// hasTAP says whether namespace ns has a TAP named tapName or, for "", a
// TAP with a VM port.
func hasTAP(ns, tapName string) bool {
	h, err := netns.Open(ns)
	if err != nil {
		return false
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return false
	}
	if tapName != "" {
		l := netns.LinkNamed(links, tapName)
		return l != nil && l.IsTAP()
	}
	taps := map[int]bool{}
	for _, l := range links {
		taps[l.Index] = l.IsTAP()
	}
	for _, l := range links {
		if l.Kind == "macvtap" && !l.ParentElsewhere && taps[l.Parent] {
			return true
		}
	}
	return false
}
