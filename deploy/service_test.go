package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
	"github.com/tapfwd/tapfwd/internal/testkit/prom"
)

// settingRE is a setting's line in the sample configuration, commented
// out or not.
var settingRE = regexp.MustCompile(`^#?([a-z][a-z0-9-]*) = `)

// instanceConfig writes NAME.conf: the sample configuration with the
// settings of set given those values (a setting the sample has commented
// out is taken in; one it lacks is added), and returns its path.
func instanceConfig(t *testing.T, name string, set map[string]string) string {
	t.Helper()
	var lines []string
	done := map[string]bool{}
	for l := range strings.SplitSeq(strings.TrimSuffix(readFile(t, "tapfwd.conf.sample"), "\n"), "\n") {
		if m := settingRE.FindStringSubmatch(l); m != nil && set[m[1]] != "" {
			l, done[m[1]] = m[1]+" = "+set[m[1]], true
		}
		lines = append(lines, l)
	}
	for k, v := range set {
		if !done[k] {
			lines = append(lines, k+" = "+v)
		}
	}
	path := filepath.Join(t.TempDir(), name+".conf")
	writeFile(t, path, strings.Join(lines, "\n")+"\n")
	return path
}

// unitArgs are the command line of the unit's ExecStart for the config
// file conf, run the way systemd would with the unit's capabilities and
// those of the drop-in netns.conf (tap-netns).
func unitArgs(t *testing.T, tapfwd, conf string) []string {
	t.Helper()
	unit := readFile(t, unitFile)
	caps := append(strings.Fields(testkit.UnitLine(t, unit, "AmbientCapabilities")), dropIns["netns.conf"]...)
	execStart := strings.Fields(strings.ReplaceAll(testkit.UnitLine(t, unit, "ExecStart"), "/etc/tapfwd/%i.conf", conf))
	return append(testkit.SetprivArgs(caps), append([]string{tapfwd}, execStart[1:]...)...)
}

// addNetns makes the network namespace name for the test, removed when
// it ends.
func addNetns(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
}

// waitMetrics waits until /metrics answers at addr in namespace ns.
func waitMetrics(t *testing.T, bed *testbed.Bed, ns, addr string, fw *testbed.Process) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, err := testkit.HTTPGet(t, bed, ns, "http://"+addr+"/metrics")
		if err == nil && code == 200 {
			return body
		}
		if time.Now().After(deadline) || fw.Exited() {
			t.Fatalf("no /metrics at %s in %s (%d, %v):\n%s", addr, ns, code, err, fw.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSampleTwoInstances runs two instances as the unit does (its
// ExecStart, capabilities and netns.conf), each from the sample
// configuration with its own NIC settings, TAP and lab namespace, on one
// NIC. With the sample's metrics-addr the second is refused before it
// makes its TAP, naming the setting and the first instance; with the next
// port, as the sample says, it starts, and a real Prometheus with the
// shipped prometheus.yml and targets.yml (its second entry taken in, as
// its comment says) scrapes both.
func TestSampleTwoInstances(t *testing.T) {
	testkit.NeedRoot(t, "setpriv", "prometheus")
	tapfwd := testkit.PlainTapfwd(t)
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	lab2, tap2 := "tfwl2-"+bed.ID, "tfwt2-"+bed.ID
	addNetns(t, lab2)
	x := bed.LabAddr.Addr().As4()
	lab1conf := instanceConfig(t, "lab1", map[string]string{"nic": bed.NIC, "tap": bed.LabIf, "tap-netns": bed.LabNS, "tap-addr": bed.LabAddr.String()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fw1, err := bed.StartForwarder(ctx, "tapfwd@lab1", "setpriv", unitArgs(t, tapfwd, lab1conf)...)
	if err != nil {
		t.Fatal(err)
	}
	lab2set := map[string]string{"nic": bed.NIC, "tap": tap2, "tap-netns": lab2, "tap-addr": fmt.Sprintf("%d.%d.%d.3/24", x[0], x[1], x[2])}

	out, err := bed.Run(ctx, bed.FwdNS, "setpriv", unitArgs(t, tapfwd, instanceConfig(t, "lab2", lab2set))...)
	want := fmt.Sprintf("--metrics-addr 127.0.0.1:9310: bind: address already in use, by pid %d (%s run --config %s)", fw1.Pid(), tapfwd, lab1conf)
	t.Logf("the second instance, refused: %s", strings.TrimSpace(out))
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "each tapfwd needs an address of its own") {
		t.Errorf("the second instance with the sample's metrics-addr: %v, want a refusal with %q:\n%s", err, want, out)
	}
	for _, ns := range []string{lab2, bed.FwdNS} {
		if _, err := bed.Run(ctx, ns, "ip", "link", "show", tap2); err == nil {
			t.Errorf("the refused instance left its TAP %s in %s", tap2, ns)
		}
	}

	lab2set["metrics-addr"] = "127.0.0.1:9311"
	fw2, err := bed.Start(bed.FwdNS, "tapfwd@lab2", "setpriv", unitArgs(t, tapfwd, instanceConfig(t, "lab2", lab2set))...)
	if err != nil {
		t.Fatal(err)
	}
	waitMetrics(t, bed, bed.FwdNS, "127.0.0.1:9311", fw2)

	targets := filepath.Join(t.TempDir(), "targets.yml")
	writeFile(t, targets, regexp.MustCompile(`(?m)^#(- targets:|  labels:|    unit:)`).ReplaceAllString(readFile(t, "prometheus/targets.yml"), "$1"))
	abs, err := filepath.Abs("prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	config := strings.NewReplacer("- rules.yml", "- "+abs, "[targets.yml]", "["+targets+"]").Replace(readFile(t, "prometheus/prometheus.yml"))
	server := prom.StartServer(t, bed, config)
	deadline := time.Now().Add(30 * time.Second)
	for prom.Query(t, bed, `count(tapfwd_build_info{job="tapfwd", unit=~"tapfwd@lab[12]"})`) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("prometheus has not scraped both instances after 30 s (up: lab1 %v, lab2 %v):\n%s",
				prom.Query(t, bed, `up{unit="tapfwd@lab1"}`), prom.Query(t, bed, `up{unit="tapfwd@lab2"}`), server.Output())
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, fw := range []*testbed.Process{fw1, fw2} {
		if err := fw.Stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, fw.Output())
		}
	}
}

// TestMetricsSocket runs an instance the way systemd runs it with
// tapfwd@.socket: systemd-socket-activate, in the wire's namespace (the
// host side, where Prometheus would run), binds the socket's ListenStream
// and passes it, named as FileDescriptorName says, to the unit's ExecStart
// started in the fwd namespace (where the NIC is), whose TAP moves into the
// lab's. /metrics answers on the wire's side, for tapfwd's TAP in the lab,
// and nothing listens at the sample's metrics-addr in tapfwd's own
// namespace: the passed socket replaced it.
func TestMetricsSocket(t *testing.T) {
	testkit.NeedRoot(t, "setpriv", "systemd-socket-activate")
	tapfwd := testkit.PlainTapfwd(t)
	socket := readFile(t, "systemd/tapfwd@.socket")
	listen, name := testkit.UnitLine(t, socket, "ListenStream"), testkit.UnitLine(t, socket, "FileDescriptorName")
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	conf := instanceConfig(t, "lab1", map[string]string{"nic": bed.NIC, "tap": bed.LabIf, "tap-netns": bed.LabNS, "tap-addr": bed.LabAddr.String()})
	if !strings.Contains(readFile(t, conf), "\nmetrics-addr = "+listen+"\n") {
		t.Fatalf("the sample's metrics-addr is not %s, the socket's: the check below that tapfwd did not bind it proves nothing", listen)
	}
	args := append([]string{"--listen=" + listen, "--fdname=" + name, "ip", "netns", "exec", bed.FwdNS, "setpriv"}, unitArgs(t, tapfwd, conf)...)
	// It starts tapfwd, in place, on the first connection.
	fw, err := bed.Start(bed.WireNS, "tapfwd@lab1 under systemd-socket-activate", "systemd-socket-activate", args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fw.Kill)
	body := waitMetrics(t, bed, bed.WireNS, listen, fw)
	if !strings.Contains(body, "tapfwd_build_info{") || !strings.Contains(body, `device="`+bed.LabIf+`"`) {
		t.Errorf("the wire's side got no tapfwd metrics of the TAP %s:\n%.2000s", bed.LabIf, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := bed.WaitLabReachable(ctx, 10*time.Second); err != nil {
		t.Errorf("the lab does not answer through tapfwd: %v\n%s", err, fw.Output())
	}
	if _, err := bed.Run(ctx, bed.LabNS, "ip", "link", "show", bed.LabIf); err != nil {
		t.Errorf("the TAP is not in the lab's namespace: %v", err)
	}
	if code, _, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+listen+"/metrics"); err == nil {
		t.Errorf("tapfwd's namespace answers at %s too (%d): it bound metrics-addr besides the passed socket", listen, code)
	}
	if err := fw.Stop(); err != nil {
		t.Errorf("stop: %v\n%s", err, fw.Output())
	}

	// Two sockets passed: refused, before the TAP is made.
	args = append([]string{"--listen=127.0.0.1:9312", "--listen=127.0.0.1:9313", "ip", "netns", "exec", bed.FwdNS, "setpriv"}, unitArgs(t, tapfwd, conf)...)
	two, err := bed.Start(bed.WireNS, "tapfwd given two sockets", "systemd-socket-activate", args...)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !two.Exited() && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		testkit.HTTPGet(t, bed, bed.WireNS, "http://127.0.0.1:9312/metrics") // the first connection starts it
	}
	testkit.WaitExit(t, two, time.Second)
	if want := "tapfwd: the service manager passed 2 sockets (LISTEN_FDS), want one"; !strings.Contains(two.Output(), want) {
		t.Errorf("given two sockets, tapfwd said:\n%s\nwant %q", two.Output(), want)
	}
	if _, err := bed.Run(ctx, bed.LabNS, "ip", "link", "show", bed.LabIf); err == nil {
		t.Errorf("tapfwd given two sockets made its TAP")
	}
}

// TestNetnsUnit runs tapfwd-netns@.service's ExecStart as systemd would
// for an instance NS (%I as its argument): twice, the second time with the
// namespace there, both succeed and leave one namespace. An instance
// whose tap-netns names it, run as the unit with netns.conf, then moves
// its TAP there and the lab answers through it.
func TestNetnsUnit(t *testing.T) {
	testkit.NeedRoot(t, "setpriv")
	tapfwd := testkit.PlainTapfwd(t)
	execStart := testkit.UnitLine(t, readFile(t, "systemd/tapfwd-netns@.service"), "ExecStart")
	script, ok := strings.CutPrefix(execStart, "/bin/sh -c '")
	script, ok2 := strings.CutSuffix(script, "' tapfwd-netns %I")
	if !ok || !ok2 {
		t.Fatalf("ExecStart=%s: want /bin/sh -c '...' tapfwd-netns %%I", execStart)
	}
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	ns := "tfwns-" + bed.ID
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	for _, run := range []string{"first", "second"} {
		if out, err := exec.Command("/bin/sh", "-c", script, "tapfwd-netns", ns).CombinedOutput(); err != nil {
			t.Fatalf("%s start: %v\n%s", run, err, out)
		}
	}
	list, err := exec.Command("ip", "netns", "list").Output()
	if err != nil || strings.Count(string(list), ns+"\n")+strings.Count(string(list), ns+" ") != 1 {
		t.Fatalf("ip netns list (%v):\n%s\nwant %s once", err, list, ns)
	}
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		t.Fatal(err)
	}
	// The bed's lab namespace stands aside: the TAP goes to the unit's.
	conf := instanceConfig(t, "lab1", map[string]string{"nic": bed.NIC, "tap": bed.LabIf, "tap-netns": ns, "tap-addr": bed.LabAddr.String(), "metrics-addr": `""`})
	fw, err := bed.Start(bed.FwdNS, "tapfwd@lab1", "setpriv", unitArgs(t, tapfwd, conf)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		out, err := bed.Run(ctx, ns, "ping", "-c", "1", "-W", "1", bed.WireAddr.Addr().String())
		if err == nil {
			break
		} else if ctx.Err() != nil || fw.Exited() {
			t.Fatalf("the namespace %s does not reach the wire through tapfwd: %v %s\n%s", ns, err, out, fw.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := fw.Stop(); err != nil {
		t.Errorf("stop: %v\n%s", err, fw.Output())
	}
}
