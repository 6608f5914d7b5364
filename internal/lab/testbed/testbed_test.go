package testbed

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type link struct {
	Name      string   `json:"ifname"`
	Flags     []string `json:"flags"`
	OperState string   `json:"operstate"`
	MTU       int      `json:"mtu"`
	Master    string   `json:"master"`
}

func showLink(t *testing.T, b *Bed, ns, dev string) link {
	t.Helper()
	out, err := exec.Command(b.ipPath, "-n", ns, "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		t.Fatalf("ip -n %s link show dev %s: %v", ns, dev, err)
	}
	var ls []link
	if err := json.Unmarshal(out, &ls); err != nil || len(ls) != 1 {
		t.Fatalf("parsing %q: %v", out, err)
	}
	return ls[0]
}

func checkUp(t *testing.T, b *Bed, ns, dev string) link {
	t.Helper()
	l := showLink(t, b, ns, dev)
	if !slices.Contains(l.Flags, "UP") || !slices.Contains(l.Flags, "LOWER_UP") {
		t.Errorf("%s in %s: flags %v, want UP and LOWER_UP", dev, ns, l.Flags)
	}
	if l.MTU != b.MTU {
		t.Errorf("%s in %s: MTU %d, want %d", dev, ns, l.MTU, b.MTU)
	}
	return l
}

func checkAddrs(t *testing.T, b *Bed) {
	t.Helper()
	if got, want := b.WireAddr.String(), "198.18."; !strings.HasPrefix(got, want) || b.WireAddr.Bits() != 24 {
		t.Errorf("WireAddr %s, want in 198.18.0.0/15 with /24", got)
	}
	if b.WireAddr.Masked() != b.LabAddr.Masked() || b.WireAddr.Addr().As4()[3] != 1 || b.LabAddr.Addr().As4()[3] != 2 {
		t.Errorf("WireAddr %s LabAddr %s, want .1 and .2 of one /24", b.WireAddr, b.LabAddr)
	}
}

func nsNames(b *Bed) []string { return []string{b.WireNS, b.FwdNS, b.LabNS} }

func TestBridge(t *testing.T) {
	t.Parallel()
	b := NewForTest(t, Config{Mode: Bridge})
	checkAddrs(t, b)
	checkUp(t, b, b.WireNS, b.WireIf)
	for _, dev := range []string{b.NIC, "l1"} {
		if l := checkUp(t, b, b.FwdNS, dev); l.Master != "br0" {
			t.Errorf("%s master %q, want br0", dev, l.Master)
		}
	}
	checkUp(t, b, b.LabNS, b.LabIf)
	if err := b.WaitLabReachable(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDirect(t *testing.T) {
	t.Parallel()
	b := NewForTest(t, Config{Mode: Direct, Subnet: 77, MTU: 9000})
	if b.WireAddr.String() != "198.18.77.1/24" || b.LabAddr.String() != "198.18.77.2/24" {
		t.Errorf("addresses %s %s, want 198.18.77.1/24 198.18.77.2/24", b.WireAddr, b.LabAddr)
	}
	checkUp(t, b, b.WireNS, b.WireIf)
	checkUp(t, b, b.LabNS, b.LabIf)
	if err := b.WaitLabReachable(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestForwarder(t *testing.T) {
	t.Parallel()
	b := NewForTest(t, Config{Mode: Forwarder})
	checkAddrs(t, b)
	for _, ns := range nsNames(b) {
		if !nsExists(ns) {
			t.Errorf("namespace %s missing", ns)
		}
	}
	checkUp(t, b, b.WireNS, b.WireIf)
	checkUp(t, b, b.FwdNS, b.NIC)
	if len(b.LabIf) > 15 || !strings.Contains(b.LabIf, b.ID) {
		t.Errorf("LabIf %q: want a name of at most 15 bytes containing %q", b.LabIf, b.ID)
	}
	// lab holds only lo until the forwarder moves its TAP there.
	err := b.Do(b.LabNS, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
			t.Errorf("lab interfaces %v, want only lo, up", ifs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing answers yet: the lab has no interface toward the wire.
	if err := b.WaitLabReachable(context.Background(), 300*time.Millisecond); err == nil {
		t.Error("lab reachable before a forwarder runs")
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	ctx := context.Background()
	b, err := New(ctx, Config{Mode: Bridge})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A process left running in the lab must not keep the bed alive.
	cmd := b.Command(ctx, b.LabNS, "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	if out, err := b.Run(ctx, b.WireNS, "ip", "-br", "addr", "show", "dev", b.WireIf); err != nil || !strings.Contains(out, b.WireAddr.String()) {
		t.Errorf("Run: %q, %v; want output with %s", out, err, b.WireAddr)
	}
	if _, err := b.Run(ctx, b.WireNS, "false"); err == nil {
		t.Error("Run false: no error")
	}

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, ns := range nsNames(b) {
		if _, err := os.Stat("/run/netns/" + ns); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after Close: %v", ns, err)
		}
	}
	out, err := exec.Command(b.ipPath, "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), b.ID) {
		t.Errorf("ip netns list still shows %s:\n%s", b.ID, out)
	}
	select {
	case err := <-waited:
		if err == nil {
			t.Error("sleep in lab exited cleanly, want killed")
		}
	case <-time.After(5 * time.Second):
		t.Error("sleep in lab still running after Close")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestParallelBedsDistinct(t *testing.T) {
	t.Parallel()
	if err := Available(); err != nil {
		t.Skipf("skipping privileged test: %v", err)
	}
	var (
		wg   sync.WaitGroup
		beds [2]*Bed
		errs [2]error
	)
	for i := range beds {
		wg.Go(func() {
			beds[i], errs[i] = New(context.Background(), Config{Mode: Forwarder, Subnet: 9})
		})
	}
	wg.Wait()
	for i, b := range beds {
		if errs[i] != nil {
			t.Fatalf("bed %d: %v", i, errs[i])
		}
		t.Cleanup(func() { b.Close() })
	}
	a, b := beds[0], beds[1]
	for _, pair := range [][2]string{{a.ID, b.ID}, {a.WireNS, b.WireNS}, {a.FwdNS, b.FwdNS}, {a.LabNS, b.LabNS}, {a.LabIf, b.LabIf}} {
		if pair[0] == pair[1] {
			t.Errorf("both beds use %q", pair[0])
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Mode: Mode(7)}, {MTU: 20}, {MTU: 1 << 20}} {
		if b, err := New(context.Background(), cfg); err == nil {
			b.Close()
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

func TestEchoRequestChecksum(t *testing.T) {
	m := EchoRequest(0xbeef, 7)
	if Checksum(m) != 0 {
		t.Errorf("echo request %x does not verify", m)
	}
	reply := append([]byte(nil), m...)
	reply[0] = 0
	if !isReplyTo(reply, 0xbeef) || isReplyTo(reply, 0xbeee) || isReplyTo(m, 0xbeef) {
		t.Error("isReplyTo misclassifies")
	}
	if id, seq, ok := EchoReply(reply); !ok || id != 0xbeef || seq != 7 {
		t.Errorf("EchoReply = %#x, %d, %v; want 0xbeef, 7, true", id, seq, ok)
	}
	// The same reply behind a 20-byte IPv4 header.
	withIP := append(make([]byte, 20), reply...)
	withIP[0] = 0x45
	if !isReplyTo(withIP, 0xbeef) {
		t.Error("EchoReply does not strip the IPv4 header")
	}
	var odd [3]byte
	binary.BigEndian.PutUint16(odd[:], 0xffff)
	if Checksum(odd[:]) != 0 {
		t.Errorf("Checksum(%x) = %#x, want 0", odd, Checksum(odd[:]))
	}
}

// TestTapfwdArgs: tapfwd run takes the bed's devices, then the caller's
// flags; and the enumerations name their values.
func TestTapfwdArgs(t *testing.T) {
	b := &Bed{NIC: "w1", LabIf: "tfwtap-0a0b0c", LabNS: "tfw-0a0b0c-lab", LabAddr: netip.MustParsePrefix("198.18.7.2/24")}
	want := "run --nic w1 --tap tfwtap-0a0b0c --tap-netns tfw-0a0b0c-lab --tap-addr 198.18.7.2/24 --queues 2"
	if got := strings.Join(b.TapfwdArgs("--queues", "2"), " "); got != want {
		t.Errorf("TapfwdArgs = %q, want %q", got, want)
	}
	for _, tc := range []struct{ got, want string }{
		{Bridge.String(), "bridge"}, {Mode(3).String(), "Mode(3)"}, {Mode(-1).String(), "Mode(-1)"},
		{HostsBridge.String(), "bridge"}, {PeerRemote.String(), "remote"}, {Peering(2).String(), "Peering(2)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
