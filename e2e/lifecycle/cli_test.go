package lifecycle

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
	"github.com/tapfwd/tapfwd/netns"
	"github.com/tapfwd/tapfwd/tap"
)

// links are the names of the links in namespace ns.
func links(t *testing.T, ns string) map[string]bool {
	t.Helper()
	ls, err := kernel.OpenNS(t, ns).Links()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range ls {
		out[l.Name] = true
	}
	return out
}

// TestChecksBeforeDevices: values the machine refuses fail tapfwd run with
// one line in the user's words before any device is made: no link appears
// in the bed's namespaces.
func TestChecksBeforeDevices(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	var inUse net.Listener
	if err := netns.Do(bed.FwdNS, func() (err error) { inUse, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()
	open := filepath.Join(t.TempDir(), "vhost")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	others := filepath.Join(t.TempDir(), "vhost")
	os.Mkdir(others, 0o755)
	os.Chown(others, 65534, 65534)
	before := [2]map[string]bool{links(t, bed.FwdNS), links(t, bed.LabNS)}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cpus", "1023"}, 1, `--cpus 1023: "1023" is not a CPU this process may use`},
		{[]string{"--metrics-addr", "198.18.0.1:1"}, 1, "--metrics-addr 198.18.0.1:1: bind: cannot assign requested address"},
		{[]string{"--metrics-addr", inUse.Addr().String()}, 1, fmt.Sprintf("bind: address already in use, by pid %d (%s", os.Getpid(), os.Args[0])},
		{[]string{"--tap-napi-threaded", "--tap-napi-cpu", "1023"}, 1, "--tap-napi-cpu 1023: CPU 1023 is not online"},
		{[]string{"--user", "tfw-no-such-user"}, 1, `--user: no user "tfw-no-such-user"`},
		{[]string{"--vm-ports", "1", "--vm-port-owner", "tfw-no-such-user"}, 1, `--vm-port-owner: no user "tfw-no-such-user"`},
		{[]string{"--vm-ports", "1", "--vhost-user", open}, 1, "group or others may write to it"},
		{[]string{"--vm-ports", "1", "--vhost-user", others}, 1, "is owned by uid 65534, not root"},
		{[]string{"--ready-fd", "9"}, 1, "--ready-fd 9: not an open file descriptor"},
		{[]string{"--nic", "lo"}, 1, "--tap-mtu: the TAP would take the NIC's MTU, 65536"},
		{[]string{"--tap", "lo"}, 1, `name "lo" is in use in network namespace "` + bed.LabNS + `" (a loopback device)`},
		{[]string{"--tap-netns", "tfw-no-such-ns"}, 1, `network namespace "tfw-no-such-ns" not found`},
		{[]string{"--tap-mtu", "70000"}, 2, "--tap-mtu 70000: want 68 to 65521 bytes"},
		{[]string{"--tap-mac", "01:00:5e:00:00:01"}, 2, "--tap-mac 01:00:5e:00:00:01: a multicast address"},
		{[]string{"--tap-mac", "00:00:00:00:00:00"}, 2, "--tap-mac 00:00:00:00:00:00: all zeros"},
		{[]string{"--tap-addr", "198.18.1.2"}, 2, "--tap-addr 198.18.1.2: want the address with its prefix length"},
	} {
		args := append(append([]string{"run"}, bed.ForwarderArgs()...), tc.args...)
		out, err := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), args...).CombinedOutput()
		var ee *exec.ExitError
		msg := strings.TrimSpace(string(out))
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(msg, tc.want) || clitest.Flaw(msg) != "" {
			t.Errorf("tapfwd run ... %q: %v, want exit %d and one line in the user's words with %q:\n%s", tc.args, err, tc.code, tc.want, msg)
		}
		if after := [2]map[string]bool{links(t, bed.FwdNS), links(t, bed.LabNS)}; len(after[0]) != len(before[0]) || len(after[1]) != len(before[1]) {
			t.Errorf("tapfwd run ... %q made a link before failing: %v, was %v", tc.args, after, before)
		}
	}
}

// TestMACKeptAcrossRestart: the TAP tapfwd makes has the MAC its name and
// namespace have on this machine, the same on the next run, so that the
// wire's caches stay right; JSON logs carry CPU lists as arrays; down
// says what it removed in words.
func TestMACKeptAcrossRestart(t *testing.T) {
	id, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(id)))
	if err != nil {
		t.Fatal(err)
	}
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	want := tap.StableMAC(key, bed.LabNS, bed.LabIf).String()
	mac := func() string { return kernel.LinkMAC(t, bed.LabNS, bed.LabIf).String() }
	fw := testkit.StartOn(t, bed, testkit.Tapfwd(t), "--metrics-addr", "")
	first := mac()
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	fw = testkit.StartOn(t, bed, testkit.Tapfwd(t), "--metrics-addr", "", "--log-format", "json", "--persist", "--cpus", "0")
	if second := mac(); first != want || second != want {
		t.Errorf("the TAP's MAC: %s, then %s after a restart; want %s both times", first, second, want)
	}
	if !strings.Contains(fw.Output(), `"cpus":[0]`) {
		t.Errorf("the JSON log has no CPU list as an array:\n%s", fw.Output())
	}
	if err := fw.Stop(); err != nil {
		t.Fatal(err)
	}
	out, err := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), "down", "--tap", bed.LabIf, "--netns", bed.LabNS).Output()
	if err != nil || string(out) != "removed TAP "+bed.LabIf+"\n" {
		t.Errorf("down: %q, %v", out, err)
	}
}

// TestFailedStartWarnsOfNothing: a second tapfwd on the NIC whose start
// fails (its metrics address is the first one's) says only why it failed,
// with no warning about the first (issue 38, item 7a): that warning is
// for a tapfwd that runs.
func TestFailedStartWarnsOfNothing(t *testing.T) {
	bed, fw := testkit.Start(t, testkit.Tapfwd(t))
	args := append(bed.TapfwdArgs(), "--tap", "tfwt2-"+bed.ID, "--metrics-addr", testkit.MetricsAddr)
	out, err := bed.Command(context.Background(), bed.FwdNS, testkit.Tapfwd(t), args...).CombinedOutput()
	msg := strings.TrimSpace(string(out))
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(msg, "address already in use") {
		t.Fatalf("second tapfwd on the NIC with the first's metrics address: %v, want exit 1 saying the address is in use:\n%s", err, msg)
	}
	if strings.Contains(msg, "another tapfwd") || strings.Contains(msg, "\n") {
		t.Errorf("a start that failed said more than why (tapfwd pid %d runs on the NIC):\n%s", fw.Pid(), msg)
	}
}
