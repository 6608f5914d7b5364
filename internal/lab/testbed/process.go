package testbed

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
)

// Process is a process started in a bed's namespace with its output
// collected: a forwarder (tapfwd, or the bench's naive baseline) from
// StartForwarder, or another program from Start.
type Process struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{}
	err    error
}

// ForwarderArgs are the flags by which a forwarder takes the bed's devices,
// the same for tapfwd run and the naive baseline: the NIC, the TAP's name,
// the lab namespace it moves into and the lab address it gets.
func (b *Bed) ForwarderArgs() []string {
	return []string{"--nic", b.NIC, "--tap", b.LabIf, "--tap-netns", b.LabNS, "--tap-addr", b.LabAddr.String()}
}

// TapfwdArgs are the arguments of `tapfwd run` on the bed: its devices
// (ForwarderArgs), then extra.
func (b *Bed) TapfwdArgs(extra ...string) []string {
	return append(append([]string{"run"}, b.ForwarderArgs()...), extra...)
}

// StartTapfwd runs exe, a tapfwd binary, as `tapfwd run` with the bed's
// devices and then extra (TapfwdArgs), and waits until the lab answers
// ping from the wire (StartForwarder). The bench and the tests start
// tapfwd on a bed through it.
func (b *Bed) StartTapfwd(ctx context.Context, exe string, extra ...string) (*Process, error) {
	return b.StartForwarder(ctx, "tapfwd", exe, b.TapfwdArgs(extra...)...)
}

// StartForwarder runs exe with args in b.FwdNS (a Forwarder bed) and waits
// until the lab answers ping from the wire. name says in errors what was
// started ("tapfwd"). The process is not tied to ctx, which bounds only the
// wait: Stop ends it with SIGTERM so that it can clean up, and Close kills
// it if it is still running.
func (b *Bed) StartForwarder(ctx context.Context, name, exe string, args ...string) (*Process, error) {
	if b.Mode != Forwarder {
		return nil, fmt.Errorf("testbed: bed mode %v has no forwarder", b.Mode)
	}
	p, err := b.Start(b.FwdNS, name, exe, args...)
	if err != nil {
		return nil, err
	}
	if err := b.WaitLabReachable(ctx, 10*time.Second); err != nil {
		p.Stop()
		out := p.Tail(3)
		if out == "" {
			out = "(nothing)"
		}
		return nil, fmt.Errorf("testbed: lab not reachable through %s: %w; %s said: %s", name, err, name, out)
	}
	return p, nil
}

// Start runs exe with args in namespace ns, its stdout and stderr
// collected (Output); name says in errors what was started. The process is
// not waited for: Stop or Kill ends it, and Close kills it if it is still
// running.
func (b *Bed) Start(ns, name, exe string, args ...string) (*Process, error) {
	cmd := b.Command(context.Background(), ns, exe, args...)
	p := &Process{name: name, cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testbed: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id of `ip netns exec`, which execs the program in
// place.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Alive returns nil while the process runs, and an error with the last
// lines it logged once it has ended.
func (p *Process) Alive() error {
	if !p.Exited() {
		return nil
	}
	return fmt.Errorf("%s exited: %s", p.name, p.Tail(3))
}

// Output is what the process has logged so far (stdout and stderr).
func (p *Process) Output() string { return p.stderr.String() }

// Tail is the last n lines of Output, joined by " | ".
func (p *Process) Tail(n int) string {
	l := strings.Split(strings.TrimSpace(p.Output()), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// StopGrace is how long Stop waits after SIGTERM: what tapfwd's systemd
// unit gives it (TimeoutStopSec) before systemd kills it.
const StopGrace = 5 * time.Second

// Stop sends SIGTERM, waits up to StopGrace (then kills), and returns the
// exit error: nil for a clean exit 0. It may be called again, and after
// the process ended on its own.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(StopGrace):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("testbed: %s did not exit within %v of SIGTERM", p.name, StopGrace)
	}
}

// Kill sends SIGKILL (no clean-up runs, as when the forwarder crashes) and
// waits until the process is gone.
func (p *Process) Kill() {
	p.cmd.Process.Kill()
	<-p.done
}
