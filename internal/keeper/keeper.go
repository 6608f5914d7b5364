package keeper

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A keeper is the same binary started again with a hidden subcommand,
// still privileged, in a process group of its own so that a signal to
// tapfwd's group (a Ctrl-C, kill -9 -- -PGID) does not reach it. It reads its job as JSON from stdin, begins
// it and says "ready DETAIL" or "error WHY" in one line on stdout, then
// waits for stdin to close, which happens when tapfwd ends however it ends
// (exit, signal, SIGKILL), finishes the job and says "done". It takes no
// other input. Stop waits for that line, not for the exit, which can take
// long (a race-detector build sleeps a second at exit) and does nothing
// tapfwd waits for.
//
// The program's main must run ServeJanitor when its first argument is
// JanitorCommand, and ServeDHCP for DHCPCommand.
const (
	JanitorCommand = "janitor"
	DHCPCommand    = "dhcp-keeper"
)

// timeout bounds a keeper's start and its stop.
const timeout = 20 * time.Second

// Keeper is a running keeper.
type Keeper struct {
	what   string
	pid    int
	hold   *os.File // its stdin: closing it tells it to finish
	exited chan struct{}
	// finished is closed once it said its job is done, or closed its
	// stdout (exited) without saying so.
	finished chan struct{}
	detail   string // what it said when ready
	// stopping is set once Stop was called.
	stopping atomic.Bool
}

// start starts the keeper for job (what names it in errors), runs its
// subcommand sub and waits until it is ready. Its stderr goes, line by
// line, to log under msg, or with a nil log to this process's stderr.
func start(what, sub string, job any, log *slog.Logger, msg string) (*Keeper, error) {
	p, err := newPipes(log != nil)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", sub)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.child[0], p.child[1], os.Stderr
	// Its own process group: its lifetime is its stdin's, not the group's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if log != nil {
		cmd.Stderr = p.child[2]
		go relay(p.log, log, msg)
	}
	err = cmd.Start()
	closeAll(p.child)
	if err != nil {
		p.hold.Close()
		p.status.Close()
		return nil, fmt.Errorf("starting the %s: %w", what, err)
	}
	k := &Keeper{what: what, pid: cmd.Process.Pid, hold: p.hold, exited: make(chan struct{}), finished: make(chan struct{})}
	go func() { cmd.Wait(); close(k.exited) }()
	if err := k.handshake(job, p.status, cmd.Process); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

// pipes are a keeper's stdin, stdout and (when logged) stderr: the
// child's ends, closed here once it has them, and ours.
type pipes struct {
	child             []*os.File
	hold, status, log *os.File
}

func newPipes(withLog bool) (*pipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		closeAll([]*os.File{inR, inW})
		return nil, err
	}
	p := &pipes{child: []*os.File{inR, stW}, hold: inW, status: stR}
	if withLog {
		logR, logW, err := os.Pipe()
		if err != nil {
			closeAll(append(p.child, inW, stR))
			return nil, err
		}
		p.child, p.log = append(p.child, logW), logR
	}
	return p, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// handshake sends the job and reads the keeper's first line.
func (k *Keeper) handshake(job any, status io.ReadCloser, p *os.Process) error {
	if err := json.NewEncoder(k.hold).Encode(job); err != nil {
		return fmt.Errorf("telling the %s: %w", k.what, err)
	}
	line := make(chan string, 1)
	go func() {
		defer status.Close()
		defer close(k.finished)
		r := bufio.NewReader(status)
		l, _ := r.ReadString('\n')
		line <- strings.TrimSpace(l)
		// The next line says the job is done; EOF, that it exited.
		r.ReadString('\n')
	}()
	select {
	case l := <-line:
		if detail, ok := strings.CutPrefix(l, "ready"); ok {
			k.detail = strings.TrimSpace(detail)
			return nil
		}
		if msg, ok := strings.CutPrefix(l, "error "); ok {
			return errors.New(msg)
		}
		return fmt.Errorf("the %s exited without a word", k.what)
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("the %s did not answer within %v", k.what, timeout)
	}
}

// relay logs the keeper's stderr, line by line.
func relay(r *os.File, log *slog.Logger, msg string) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		log.Info(msg, "line", sc.Text())
	}
}

// Stop tells the keeper to finish its job and waits until it has, not
// until it has exited.
func (k *Keeper) Stop() error {
	k.stopping.Store(true)
	k.hold.Close()
	select {
	case <-k.finished:
		return nil
	case <-k.exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the %s did not stop in time", k.what)
	}
}

// A job is what a keeper does: begin at tapfwd's start (its error fails
// the start), end once tapfwd has ended or done is closed.
type job interface {
	begin(stderr io.Writer) (detail string, err error)
	done() <-chan struct{} // nil: the job ends only with tapfwd
	end(stderr io.Writer) error
}

// serve is a keeper's side of the protocol, for j decoded from stdin.
func serve(name string, j job, stdin io.Reader, stdout, stderr io.Writer) error {
	// SIGPIPE too: once tapfwd is gone, writing to it must not end the
	// keeper before it has finished. SIGTTOU: in a process group of its
	// own the keeper is in the background of tapfwd's terminal, whose
	// "stty tostop" would stop it at its first line on stderr; ignored,
	// the line is written.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE, syscall.SIGTTOU)
	if err := json.NewDecoder(stdin).Decode(j); err != nil {
		return fmt.Errorf("%s: reading the job: %w", name, err)
	}
	detail, err := j.begin(stderr)
	if err != nil {
		fmt.Fprintf(stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return nil
	}
	fmt.Fprintln(stdout, strings.TrimSpace("ready "+detail))
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-j.done():
	}
	err = j.end(stderr)
	fmt.Fprintln(stdout, "done")
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
