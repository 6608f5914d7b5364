package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

type vxlanLink struct {
	link
	LinkInfo struct {
		Kind string `json:"info_kind"`
		Data struct {
			ID     int    `json:"id"`
			Port   int    `json:"port"`
			Local  string `json:"local"`
			Remote string `json:"remote"`
			Link   string `json:"link"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

func showVXLAN(t *testing.T, h *Hosts, i int) vxlanLink {
	t.Helper()
	host := h.Host[i]
	out, err := exec.Command(h.run.ipPath, "-n", host.NS, "-d", "-j", "link", "show", "dev", host.VXLAN).Output()
	if err != nil {
		t.Fatalf("ip -n %s -d link show dev %s: %v", host.NS, host.VXLAN, err)
	}
	var ls []vxlanLink
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		t.Fatalf("parsing %q: %v", out, err)
	}
	return ls[0]
}

// checkHosts checks what every two-host bed has: four namespaces, the
// underlay up with its addresses, each VXLAN device up with the bed's VNI,
// port 4789, the MTU and the underlay as its lower device, and the other
// host reachable over the underlay.
func checkHosts(t *testing.T, h *Hosts) {
	t.Helper()
	if h.UnderlayMTU != 1500 || h.MTU != 1450 {
		t.Errorf("MTUs %d/%d, want 1500 underlay, 1450 VXLAN", h.UnderlayMTU, h.MTU)
	}
	for _, ns := range h.namespaces() {
		if !nsExists(ns) || !strings.Contains(ns, h.ID) {
			t.Errorf("namespace %s missing or without the bed's ID %s", ns, h.ID)
		}
	}
	for i, host := range h.Host {
		if !strings.HasPrefix(host.UnderlayAddr.String(), "198.19.") || !strings.HasPrefix(host.LabAddr.String(), "198.18.") ||
			host.UnderlayAddr.Addr().As4()[3] != byte(i+1) || host.LabAddr.Addr().As4()[3] != byte(i+1) {
			t.Errorf("host %d: underlay %s, lab %s; want 198.19.X.%d/24 and 198.18.X.%d/24", i+1, host.UnderlayAddr, host.LabAddr, i+1, i+1)
		}
		if host.LabAddr.Masked() != h.Host[0].LabAddr.Masked() {
			t.Errorf("labs in different subnets: %s, %s", h.Host[0].LabAddr, host.LabAddr)
		}
		u := showLink(t, h.run, host.NS, host.Underlay)
		if !strings.Contains(strings.Join(u.Flags, ","), "LOWER_UP") || u.MTU != 1500 {
			t.Errorf("host %d underlay: %+v", i+1, u)
		}
		vx := showVXLAN(t, h, i)
		d := vx.LinkInfo.Data
		if vx.LinkInfo.Kind != "vxlan" || d.ID != h.VNI || d.Port != VXLANPort || d.Local != host.UnderlayAddr.Addr().String() || d.Link != host.Underlay || vx.MTU != h.MTU ||
			!strings.Contains(strings.Join(vx.Flags, ","), "UP") {
			t.Errorf("host %d VXLAN device: %+v", i+1, vx)
		}
		// The other host answers over the underlay.
		under := &Bed{WireNS: host.NS, LabAddr: h.Host[1-i].UnderlayAddr, ipPath: h.run.ipPath}
		if err := under.WaitLabReachable(context.Background(), 5*time.Second); err != nil {
			t.Errorf("underlay: %v", err)
		}
	}
}

func TestHostsForwarder(t *testing.T) {
	t.Parallel()
	h := NewHostsForTest(t, HostsConfig{})
	if h.Mode != HostsForwarder || h.Peering != PeerFDB || h.VNI != 42 {
		t.Errorf("zero config gave %v %v VNI %d, want forwarder, fdb, 42", h.Mode, h.Peering, h.VNI)
	}
	checkHosts(t, h)
	for i, host := range h.Host {
		if d := showVXLAN(t, h, i).LinkInfo.Data; d.Remote != "" {
			t.Errorf("host %d: fdb peering made a device with a remote: %+v", i+1, d)
		}
		fdb, err := h.Run(context.Background(), host.NS, h.bridgePath, "fdb", "show", "dev", host.VXLAN)
		if err != nil || !strings.Contains(fdb, "00:00:00:00:00:00 dst "+h.Host[1-i].UnderlayAddr.Addr().String()) {
			t.Errorf("host %d fdb: %q, %v; want the all-zeros entry toward the other host", i+1, fdb, err)
		}
		if len(host.LabIf) > 15 || !strings.Contains(host.LabIf, h.ID) || host.LabIf == h.Host[1-i].LabIf {
			t.Errorf("host %d LabIf %q: want a unique name of at most 15 bytes containing %q", i+1, host.LabIf, h.ID)
		}
		// The lab holds only lo until the forwarder moves its TAP there.
		err = h.Do(host.LabNS, func() error {
			ifs, err := net.Interfaces()
			if err == nil && (len(ifs) != 1 || ifs[0].Name != "lo") {
				t.Errorf("lab %d interfaces %v, want only lo", i+1, ifs)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	v := h.View(1, 0)
	a, b := h.Host[1], h.Host[0]
	if v.Mode != Forwarder || v.WireNS != a.LabNS || v.WireIf != a.LabIf || v.WireAddr != a.LabAddr ||
		v.FwdNS != b.NS || v.NIC != "vx0" || v.LabNS != b.LabNS || v.LabIf != b.LabIf || v.LabAddr != b.LabAddr || v.MTU != 1450 {
		t.Errorf("View(1, 0) = %+v", v)
	}
	want := []string{"--nic", "vx0", "--tap", b.LabIf, "--tap-netns", b.LabNS, "--tap-addr", b.LabAddr.String()}
	if got := h.ForwarderArgs(0); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ForwarderArgs(0) = %q, want %q", got, want)
	}
	if err := h.WaitReachable(context.Background(), 300*time.Millisecond); err == nil {
		t.Error("lab 2 reachable from lab 1 before any forwarder runs")
	}
}

func TestHostsRemoteBridge(t *testing.T) {
	t.Parallel()
	h := NewHostsForTest(t, HostsConfig{Mode: HostsBridge, Peering: PeerRemote, Subnet: 33, VNI: 7001})
	checkHosts(t, h)
	for i, host := range h.Host {
		if d := showVXLAN(t, h, i).LinkInfo.Data; d.Remote != h.Host[1-i].UnderlayAddr.Addr().String() {
			t.Errorf("host %d: remote %q, want %s", i+1, d.Remote, h.Host[1-i].UnderlayAddr.Addr())
		}
		for _, dev := range []string{host.VXLAN, "l1"} {
			if l := showLink(t, h.run, host.NS, dev); l.Master != "br0" {
				t.Errorf("host %d: %s master %q, want br0", i+1, dev, l.Master)
			}
		}
		if l := checkUp(t, h.View(1-i, i), host.LabNS, host.LabIf); l.MTU != 1450 {
			t.Errorf("lab %d: %s MTU %d", i+1, host.LabIf, l.MTU)
		}
	}
	if h.Host[0].LabAddr.String() != "198.18.33.1/24" || h.Host[1].UnderlayAddr.String() != "198.19.33.2/24" {
		t.Errorf("addresses %s %s, want 198.18.33.1/24 and 198.19.33.2/24", h.Host[0].LabAddr, h.Host[1].UnderlayAddr)
	}
	// Each lab reaches the other through two bridges and the tunnel.
	for _, v := range []*Bed{h.View(0, 1), h.View(1, 0)} {
		if err := v.WaitLabReachable(context.Background(), 10*time.Second); err != nil {
			t.Error(err)
		}
	}
	if v := h.View(0, 1); v.Mode != Bridge {
		t.Errorf("bridge bed's view has mode %v", v.Mode)
	}
	if _, err := h.StartForwarders(context.Background(), "x", "/bin/true", func(int) []string { return nil }); err == nil {
		t.Error("StartForwarders on a bridge bed: no error")
	}
}

func TestHostsCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	h, err := NewHosts(context.Background(), HostsConfig{Peering: PeerRemote})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var waited []chan error
	for _, ns := range h.namespaces() {
		cmd := h.Command(context.Background(), ns, "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := make(chan error, 1)
		go func() { c <- cmd.Wait() }()
		waited = append(waited, c)
	}
	// Closing a view closes the whole bed.
	if err := h.View(0, 1).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, ns := range h.namespaces() {
		if _, err := os.Stat("/run/netns/" + ns); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after Close: %v", ns, err)
		}
	}
	for i, c := range waited {
		select {
		case err := <-c:
			if err == nil {
				t.Errorf("sleep %d exited cleanly, want killed", i)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("sleep %d still running after Close", i)
		}
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestHostsFailedBuild fails a build half-way (at the second host's VXLAN
// device) and checks that none of its namespaces is left. Not parallel: it
// sets the package's step hook, which parallel tests must not see.
func TestHostsFailedBuild(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	boom := errors.New("injected failure")
	nsRE := regexp.MustCompile(`^tfw-([0-9a-f]{6})-host2$`)
	id := ""
	hostsStepHook = func(args []string) error {
		if len(args) > 4 && nsRE.MatchString(args[1]) && args[2] == "link" && args[3] == "add" && args[4] == "vx0" {
			id = nsRE.FindStringSubmatch(args[1])[1]
			return boom
		}
		return nil
	}
	defer func() { hostsStepHook = nil }()
	if _, err := NewHosts(context.Background(), HostsConfig{Mode: HostsBridge}); !errors.Is(err, boom) || id == "" {
		t.Fatalf("NewHosts: %v (bed %q), want the injected failure", err, id)
	}
	for _, n := range []string{"host1", "host2", "lab1", "lab2"} {
		if ns := nsPrefix + id + "-" + n; nsExists(ns) {
			t.Errorf("namespace %s of the failed build left behind", ns)
		}
	}
}

func TestNewHostsRejectsBadConfig(t *testing.T) {
	for _, cfg := range []HostsConfig{{Mode: HostsMode(5)}, {Peering: Peering(3)}, {MTU: 100}, {MTU: 1 << 20}, {VNI: 1 << 24}, {VNI: -1}} {
		if h, err := NewHosts(context.Background(), cfg); err == nil {
			h.Close()
			t.Errorf("NewHosts(%+v): no error", cfg)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("View(0, 0) did not panic")
		}
	}()
	(&Hosts{}).View(0, 0)
}

// TestHostsStartForwardersFails starts "forwarders" that never connect the
// labs: StartForwarders gives up when ctx ends and leaves none running.
func TestHostsStartForwardersFails(t *testing.T) {
	t.Parallel()
	h := NewHostsForTest(t, HostsConfig{})
	var hosts []int
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ps, err := h.StartForwarders(ctx, "sleeper", "sleep", func(i int) []string {
		hosts = append(hosts, i)
		return []string{"60"}
	})
	if err == nil || !strings.Contains(err.Error(), "labs not reachable through sleeper") {
		t.Fatalf("StartForwarders: %v, want labs not reachable", err)
	}
	if len(hosts) != 2 || hosts[0] != 0 || hosts[1] != 1 {
		t.Errorf("args asked for hosts %v, want [0 1]", hosts)
	}
	for i, p := range ps {
		if p == nil || !p.Exited() {
			t.Errorf("forwarder %d still running after a failed start", i)
		}
	}
}
