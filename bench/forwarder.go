package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/bench/testbed"
)

// Forwarder is a forwarding process (`tapfwd run`, or the naive baseline)
// started in a bed's fwd namespace.
type Forwarder struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// StartForwarder runs exe (the tapfwd binary) as `tapfwd run` in b.FwdNS
// with the TAP named b.LabIf moved into b.LabNS at b.LabAddr, plus extra
// flags, and waits until the lab answers ping from the wire.
func StartForwarder(ctx context.Context, b *testbed.Bed, exe string, extra ...string) (*Forwarder, error) {
	return start(ctx, b, exe, "tapfwd", append([]string{"run"}, forwarderArgs(b, extra)...))
}

// StartNaiveForwarder runs exe as `tapfwd bench naive-forwarder` (the
// songgao/water baseline of package naive) the way StartForwarder runs
// `tapfwd run`.
func StartNaiveForwarder(ctx context.Context, b *testbed.Bed, exe string) (*Forwarder, error) {
	return start(ctx, b, exe, "the naive forwarder", append([]string{"bench", "naive-forwarder"}, forwarderArgs(b, nil)...))
}

func forwarderArgs(b *testbed.Bed, extra []string) []string {
	return append([]string{"--nic", b.NIC, "--tap", b.LabIf, "--tap-netns", b.LabNS,
		"--tap-addr", b.LabAddr.String()}, extra...)
}

func start(ctx context.Context, b *testbed.Bed, exe, what string, args []string) (*Forwarder, error) {
	if b.Mode != testbed.Forwarder {
		return nil, fmt.Errorf("bench: bed mode %v has no forwarder", b.Mode)
	}
	// Not tied to ctx: Stop ends it with SIGTERM so it can clean up.
	cmd := b.Command(context.Background(), b.FwdNS, exe, args...)
	f := &Forwarder{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = f.stderr
	cmd.Stdout = f.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", what, err)
	}
	go func() {
		f.err = cmd.Wait()
		close(f.done)
	}()
	if err := b.WaitLabReachable(ctx, 10*time.Second); err != nil {
		f.Stop()
		out := lastLines(f.Output(), 3)
		if out == "" {
			out = "(nothing)"
		}
		return nil, fmt.Errorf("bench: lab not reachable through %s: %w; %s said: %s", what, err, what, out)
	}
	return f, nil
}

// Pid is the process id of `ip netns exec`, which execs tapfwd in place.
func (f *Forwarder) Pid() int { return f.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (f *Forwarder) Exited() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// Output is what tapfwd has logged so far.
func (f *Forwarder) Output() string { return f.stderr.String() }

// Stop sends SIGTERM, waits up to 3 s (then kills), and returns the exit
// error: nil for a clean exit 0.
func (f *Forwarder) Stop() error {
	select {
	case <-f.done:
		return f.err
	default:
	}
	f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.done:
		return f.err
	case <-time.After(3 * time.Second):
		f.cmd.Process.Kill()
		<-f.done
		return errors.New("bench: tapfwd did not exit within 3 s of SIGTERM")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
