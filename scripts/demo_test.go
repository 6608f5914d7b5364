// Package scripts holds the test of scripts/demo.sh, the README's first
// command (make demo).
package scripts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/testkit"
)

// TestDemo runs scripts/demo.sh as make demo does, with a tapfwd built for
// the test, and checks what a newcomer is promised: the guest on the VM
// port pings the wire, the wire pings the lab host and the guest, iperf3
// gives a Gbit/s figure through tapfwd and one through the bridge, tapfwd
// status and tapfwd_ metric lines are shown, and afterwards nothing of the
// demo is left (namespaces, VM port node, processes, temporary directory).
// Then a second run is interrupted as Ctrl-C would (SIGINT to its process
// group) once the guest is up, and must leave nothing behind either.
func TestDemo(t *testing.T) {
	testkit.NeedRoot(t, "qemu-system-x86_64", "iperf3", "ping", "curl")
	tapfwd := testkit.PlainTapfwd(t)

	t.Run("whole", func(t *testing.T) {
		tmp := t.TempDir()
		out, id, err := runDemo(t, tapfwd, tmp, "")
		if err != nil {
			t.Fatalf("demo: %v\n%s", err, out)
		}
		for _, want := range []string{
			`(?m)^    guest console: TFW: ping 198\.18\.\d+\.1 ok$`,
			`(?m)^    198\.18\.\d+\.2: 3 packets transmitted, 3 received, 0% packet loss`,
			`(?m)^    198\.18\.\d+\.11: 3 packets transmitted, 3 received, 0% packet loss`,
			`(?m)^    through tapfwd: +\d+(\.\d+)? Gbit/s$`,
			`(?m)^    through a Linux bridge: +\d+(\.\d+)? Gbit/s$`,
			`(?m)^    QUEUE +CPU +DIRECTION`,
			`(?m)^    tapfwd_packets_total\{device="w1",direction="rx",queue="0"\} [1-9]\d*$`,
			`(?m)^    tapfwd_vm_port_packets_total\{device="tfwdemo-[0-9a-f]{6}",direction="tx",port="tfwvm0"\} [1-9]\d*$`,
			`(?m)^    tapfwd exited with status 0; the TAP is gone, the VM port's node is gone$`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("the demo's output lacks %s:\n%s", want, out)
			}
		}
		checkNothingLeft(t, id, tmp)
	})

	t.Run("interrupted", func(t *testing.T) {
		tmp := t.TempDir()
		out, id, err := runDemo(t, tapfwd, tmp, "demo [4/8]")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 130 || !strings.Contains(out, "demo: interrupted") {
			t.Errorf("interrupted demo: %v, want exit status 130 and \"demo: interrupted\":\n%s", err, out)
		}
		checkNothingLeft(t, id, tmp)
	})
}

// demoID matches the demo's name for everything it makes.
var demoID = regexp.MustCompile(`namespaces (tfwdemo-[0-9a-f]{6})-wire`)

// runDemo runs scripts/demo.sh with tapfwd, in a process group of its own
// as a shell runs a command, with TMPDIR tmp. When interruptAt is not
// empty, the group gets SIGINT as soon as a line starts with it. It
// returns the output (stdout and stderr), the demo's name (tfwdemo-ID) and
// how the script ended.
func runDemo(t *testing.T, tapfwd, tmp, interruptAt string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A shell started in the background may pass SIGINT on ignored,
	// and bash cannot trap a signal ignored at its start.
	cmd := exec.CommandContext(ctx, "env", "--default-signal=INT", "bash", "demo.sh")
	cmd.Env = append(os.Environ(), "TAPFWD="+tapfwd, "TMPDIR="+tmp, "DEMO_IPERF_SECONDS=2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out strings.Builder
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if interruptAt != "" && strings.HasPrefix(line, interruptAt) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			interruptAt = ""
		}
	}
	err = cmd.Wait()
	pr.Close()
	m := demoID.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the demo named no namespaces: %v\n%s", err, out.String())
	}
	return out.String(), m[1], err
}

// checkNothingLeft looks for anything named after the demo id: network
// namespaces, VM port nodes, processes (each one the demo starts carries the
// id in its command line), and for anything in its TMPDIR tmp.
func checkNothingLeft(t *testing.T, id, tmp string) {
	t.Helper()
	for _, pattern := range []string{"/run/netns/" + id + "-*", "/dev/tapfwd/" + id + "-*", filepath.Join(tmp, "*")} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if raw, err := os.ReadFile(p); err == nil && bytes.Contains(raw, []byte(id)) {
			t.Errorf("left running: %s: %s", filepath.Dir(p), bytes.ReplaceAll(raw, []byte{0}, []byte{' '}))
		}
	}
}
