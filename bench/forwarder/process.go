package forwarder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/bench/testbed"
)

// NaiveCommand is the tapfwd-bench subcommand that runs the naive baseline
// (package naive); StartNaive starts it.
const NaiveCommand = "naive-forwarder"

// Process is a forwarding process (`tapfwd run`, or the naive baseline)
// started in a bed's fwd namespace.
type Process struct {
	what   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// Start runs exe (the tapfwd binary) as `tapfwd run` in b.FwdNS with the
// TAP named b.LabIf moved into b.LabNS at b.LabAddr, plus extra flags (from
// Options.Args, or any others), and waits until the lab answers ping from
// the wire.
func Start(ctx context.Context, b *testbed.Bed, exe string, extra ...string) (*Process, error) {
	return start(ctx, b, exe, "tapfwd", append([]string{"run"}, bedArgs(b, extra)...))
}

// StartNaive runs exe (the tapfwd-bench binary) as `tapfwd-bench
// naive-forwarder` (the songgao/water baseline of package naive) the way
// Start runs `tapfwd run`.
func StartNaive(ctx context.Context, b *testbed.Bed, exe string) (*Process, error) {
	return start(ctx, b, exe, "the naive forwarder", append([]string{NaiveCommand}, bedArgs(b, nil)...))
}

// bedArgs are the flags the bed decides, both forwarders' alike.
func bedArgs(b *testbed.Bed, extra []string) []string {
	return append([]string{"--nic", b.NIC, "--tap", b.LabIf, "--tap-netns", b.LabNS,
		"--tap-addr", b.LabAddr.String()}, extra...)
}

func start(ctx context.Context, b *testbed.Bed, exe, what string, args []string) (*Process, error) {
	if b.Mode != testbed.Forwarder {
		return nil, fmt.Errorf("forwarder: bed mode %v has no forwarder", b.Mode)
	}
	// Not tied to ctx: Stop ends it with SIGTERM so it can clean up.
	cmd := b.Command(context.Background(), b.FwdNS, exe, args...)
	p := &Process{what: what, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.Stdout = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("forwarder: start %s: %w", what, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := b.WaitLabReachable(ctx, 10*time.Second); err != nil {
		p.Stop()
		out := p.Tail(3)
		if out == "" {
			out = "(nothing)"
		}
		return nil, fmt.Errorf("forwarder: lab not reachable through %s: %w; %s said: %s", what, err, what, out)
	}
	return p, nil
}

// Pid is the process id of `ip netns exec`, which execs the forwarder in
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
	return fmt.Errorf("the forwarder exited: %s", p.Tail(3))
}

// Output is what the process has logged so far.
func (p *Process) Output() string { return p.stderr.String() }

// Tail is the last n lines of Output, joined by " | ".
func (p *Process) Tail(n int) string {
	l := strings.Split(strings.TrimSpace(p.Output()), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// Stop sends SIGTERM, waits up to 3 s (then kills), and returns the exit
// error: nil for a clean exit 0.
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
	case <-time.After(3 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return errors.New("forwarder: " + p.what + " did not exit within 3 s of SIGTERM")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
