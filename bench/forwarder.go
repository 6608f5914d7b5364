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

// Forwarder is a `tapfwd run` process started in a bed's fwd namespace.
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
	if b.Mode != testbed.Forwarder {
		return nil, fmt.Errorf("bench: bed mode %v has no forwarder", b.Mode)
	}
	args := append([]string{"run", "--nic", b.NIC, "--tap", b.LabIf, "--tap-netns", b.LabNS,
		"--tap-addr", b.LabAddr.String()}, extra...)
	// Not tied to ctx: Stop ends it with SIGTERM so it can clean up.
	cmd := b.Command(context.Background(), b.FwdNS, exe, args...)
	f := &Forwarder{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = f.stderr
	cmd.Stdout = f.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start tapfwd: %w", err)
	}
	go func() {
		f.err = cmd.Wait()
		close(f.done)
	}()
	if err := b.WaitLabReachable(ctx, 10*time.Second); err != nil {
		f.Stop()
		return nil, fmt.Errorf("bench: lab not reachable through tapfwd: %w\ntapfwd said:\n%s", err, f.Output())
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
