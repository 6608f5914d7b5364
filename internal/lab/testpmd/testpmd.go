package testpmd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Binary is the program Debian's dpdk-dev package installs.
const Binary = "dpdk-testpmd"

// ErrNotInstalled: dpdk-testpmd is not on PATH.
var ErrNotInstalled = errors.New("testpmd: " + Binary + " not installed (Debian: apt-get install dpdk-dev)")

// Find returns dpdk-testpmd's path, or ErrNotInstalled.
func Find() (string, error) {
	p, err := exec.LookPath(Binary)
	if err != nil {
		return "", ErrNotInstalled
	}
	return p, nil
}

// Config describes one testpmd run. It runs interactive (commands on its
// standard input), with no huge pages (memfd memory, which a vhost-user
// back-end can map), no PCI devices, no shared configuration and a
// runtime prefix of its own, so that any number run side by side.
type Config struct {
	// Devices are the --vdev arguments, port 0 first (VirtioUser,
	// VhostBackEnd, AFPacket).
	Devices []string
	// Forward is the forwarding mode: io, mac, macswap, rxonly, txonly,
	// csum...; "" is io. With one port, io sends back what it receives.
	Forward string
	// Queues is the receive and transmit queues per port (--rxq, --txq);
	// 0 means 1.
	Queues int
	// TxPkts is the frame size txonly sends (--txpkts); 0: testpmd's 64.
	TxPkts int
	// Burst is the frames per burst (--burst); 0: testpmd's 32.
	Burst int
	// Lcores are the CPUs it runs on (-l): the first the main one, the
	// others busy-poll the ports. "" is "0,1".
	Lcores string
	// Netns, if set, is the named network namespace it runs in (ip netns
	// exec), for AFPacket on a veth there.
	Netns string
	// EAL are more EAL options (before --): --main-lcore=N, say.
	EAL []string
	// Args are more testpmd options (after --).
	Args []string
	// Log, if set, gets everything it prints.
	Log io.Writer
}

// VirtioUser is the --vdev of a virtio-user port, the front-end of the
// vhost-user socket at path, with queues queue pairs (0: 1) and the
// guest's MAC; extra are more device arguments (mrg_rxbuf=0,
// packed_vq=1, in_order=1, queue_size=N...), comma-separated.
func VirtioUser(path string, queues int, mac net.HardwareAddr, extra string) string {
	s := fmt.Sprintf("net_virtio_user0,path=%s,queues=%d,mac=%s", path, max(queues, 1), mac)
	if extra != "" {
		s += "," + extra
	}
	return s
}

// VhostBackEnd is the --vdev of a vhost-user port whose socket testpmd
// listens on at path: DPDK's own back-end, with queues queue pairs.
func VhostBackEnd(path string, queues int) string {
	return fmt.Sprintf("net_vhost0,iface=%s,queues=%d", path, max(queues, 1))
}

// AFPacket is the --vdev of a port on network interface iface through
// AF_PACKET sockets, queues queue pairs.
func AFPacket(iface string, queues int) string {
	return fmt.Sprintf("net_af_packet0,iface=%s,qpairs=%d", iface, max(queues, 1))
}

// Process is a running testpmd.
type Process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	prefix string
	done   chan struct{}
	err    error // Wait's, once done is closed

	mu  sync.Mutex
	out bytes.Buffer // everything it printed
	cnd *sync.Cond
}

// prompt is what testpmd prints when it waits for a command.
const prompt = "testpmd> "

// Start runs testpmd and waits for its first prompt, which comes after
// its ports started (a virtio-user port: after the vhost-user set-up).
// ctx bounds the wait; Close ends it.
func Start(ctx context.Context, c Config) (*Process, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	p := &Process{prefix: "tfwd" + hex.EncodeToString(rnd[:]), done: make(chan struct{})}
	p.cnd = sync.NewCond(&p.mu)
	// stdbuf: testpmd's stdout is a pipe, which C stdio buffers whole;
	// each command's output must arrive before the prompt after it.
	argv := append([]string{"stdbuf", "-oL", bin}, p.args(c)...)
	if c.Netns != "" {
		argv = append([]string{"ip", "netns", "exec", c.Netns}, argv...)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := io.Writer(&outWriter{p})
	if c.Log != nil {
		w = io.MultiWriter(w, c.Log)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("testpmd: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testpmd: %w", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.mu.Lock()
		close(p.done)
		p.cnd.Broadcast()
		p.mu.Unlock()
	}()
	if _, err := p.waitPrompt(ctx, 0); err != nil {
		p.Kill()
		return nil, fmt.Errorf("testpmd: starting: %w\n%s", err, p.Output())
	}
	return p, nil
}

func (p *Process) args(c Config) []string {
	lcores := c.Lcores
	if lcores == "" {
		lcores = "0,1"
	}
	a := []string{"--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--no-telemetry", "--file-prefix=" + p.prefix, "-l", lcores}
	for _, d := range c.Devices {
		a = append(a, "--vdev="+d)
	}
	a = append(a, c.EAL...)
	q := strconv.Itoa(max(c.Queues, 1))
	a = append(a, "--", "-i", "--total-num-mbufs=16384", "--rxq="+q, "--txq="+q)
	if c.Forward != "" {
		a = append(a, "--forward-mode="+c.Forward)
	}
	if c.TxPkts != 0 {
		a = append(a, "--txpkts="+strconv.Itoa(c.TxPkts))
	}
	if c.Burst != 0 {
		a = append(a, "--burst="+strconv.Itoa(c.Burst))
	}
	return append(a, c.Args...)
}

type outWriter struct{ p *Process }

func (w *outWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.p.out.Write(b)
	w.p.cnd.Broadcast()
	return len(b), nil
}

// waitPrompt waits until the output from offset from on holds a prompt and
// returns what came before it.
func (p *Process) waitPrompt(ctx context.Context, from int) (string, error) {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cnd.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if i := bytes.Index(p.out.Bytes()[from:], []byte(prompt)); i >= 0 {
			return string(p.out.Bytes()[from : from+i]), nil
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("it exited (%v)", p.err)
		default:
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		p.cnd.Wait()
	}
}

// Command sends one interactive command and returns what it printed
// before the next prompt (waiting at most 30 s).
func (p *Process) Command(cmd string) (string, error) {
	p.mu.Lock()
	from := p.out.Len()
	p.mu.Unlock()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return "", fmt.Errorf("testpmd: %s: %w", cmd, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := p.waitPrompt(ctx, from)
	if err != nil {
		return out, fmt.Errorf("testpmd: %s: %w", cmd, err)
	}
	return out, nil
}

// Output is everything testpmd printed so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Pid is the process id (of ip netns exec, which execs testpmd, with Netns).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Quit ends it with the quit command and waits for it to exit.
func (p *Process) Quit() error {
	_, _ = io.WriteString(p.stdin, "quit\n")
	return p.wait(30 * time.Second)
}

// Interrupt sends SIGINT, on which testpmd stops forwarding, prints its
// forward statistics and exits, and waits for that; it returns what it
// printed after the signal.
func (p *Process) Interrupt() (string, error) {
	p.mu.Lock()
	from := p.out.Len()
	p.mu.Unlock()
	_ = p.signal(syscall.SIGINT)
	err := p.wait(30 * time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()[from:], err
}

// Kill ends it with SIGKILL at once (a crash, to the vhost-user peer) and
// waits for it.
func (p *Process) Kill() {
	_ = p.signal(syscall.SIGKILL)
	_ = p.wait(30 * time.Second)
}

// signal signals testpmd: through ip netns exec, which execs it, the same
// process.
func (p *Process) signal(s syscall.Signal) error { return p.cmd.Process.Signal(s) }

// wait waits for the exit, killing it after d, and removes the runtime
// directory it made. An exit on SIGINT or after quit is no error.
func (p *Process) wait(d time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(d):
		_ = p.signal(syscall.SIGKILL)
		<-p.done
		_ = p.removeRuntime()
		return fmt.Errorf("testpmd: still running after %v: killed", d)
	}
	_ = p.stdin.Close()
	_ = p.removeRuntime()
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && !ee.Exited() {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGINT) {
			return nil
		}
	}
	return p.err
}

// removeRuntime removes the directory EAL makes for its prefix even with
// --no-shconf: /var/run/dpdk/PREFIX as root (elsewhere under
// $XDG_RUNTIME_DIR, left alone). The prefix is the process's own.
func (p *Process) removeRuntime() error {
	if os.Geteuid() != 0 {
		return nil
	}
	return os.RemoveAll(p.RuntimeDir())
}

// RuntimeDir is where EAL keeps its runtime files as root; it is removed
// when testpmd exits.
func (p *Process) RuntimeDir() string { return filepath.Join("/var/run/dpdk", p.prefix) }

// Done is closed when testpmd has exited.
func (p *Process) Done() <-chan struct{} { return p.done }
