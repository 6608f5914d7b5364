package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/dhcp"
	"github.com/tapfwd/tapfwd/hostport"
	"github.com/tapfwd/tapfwd/netns"
)

// addHostPort gives the lab host its port on the TAP (--host-port): a
// macvlan in bridge mode that carries --tap-addr, so the host and the
// guests on VM ports reach each other inside the kernel. A persistent
// TAP's port is adopted. The kernel deletes the port with the TAP, so a
// run that does not persist has nothing to undo. Without --host-port, a
// port an earlier run left on a persistent TAP is removed: the address is
// on the TAP again.
func (d *daemon) addHostPort() error {
	if !d.c.HostPort {
		return d.dropHostPort()
	}
	p, err := hostport.Ensure(hostport.Config{TAP: d.dev.Name(), Netns: d.dev.Netns(), Addr: d.c.HostAddr})
	switch {
	case errors.Is(err, hostport.ErrNameInUse):
		return fmt.Errorf("--host-port: %w (rename or remove that interface)", err)
	case err != nil:
		return fmt.Errorf("--host-port: %w", err)
	}
	d.host = &p
	d.log.Info("host port", "name", p.Name, "mac", p.MAC.String(), "addr", addrString(p.Addr), "tap", p.TAP, "adopted", p.Adopted)
	if d.dev.Persistent() {
		d.onClose(func() { d.log.Info("the host port stays with the persistent TAP", "name", p.Name) })
	}
	return nil
}

// dropHostPort removes the host port an earlier run with --host-port left
// on the persistent TAP this run attached to.
func (d *daemon) dropHostPort() error {
	if !d.dev.Attached() {
		return nil
	}
	p, ok, err := hostport.Find(d.dev.Netns(), d.dev.Name())
	if err != nil || !ok {
		return err
	}
	if err := hostport.Remove(p); err != nil {
		return err
	}
	d.log.Info("removed the host port an earlier run left (no --host-port now): the lab address is on the TAP", "name", p.Name)
	return nil
}

func addrString(p netip.Prefix) string {
	if !p.IsValid() {
		return "none"
	}
	return p.String()
}

// labMAC is the lab host's MAC on the segment: its host port's when it has
// one (the TAP then carries no address and answers nothing), else the
// TAP's. --strict-mac accepts frames from the lab with this source only,
// and from the NIC frames to it.
func (d *daemon) labMAC() net.HardwareAddr {
	if d.host != nil {
		return d.host.MAC
	}
	return d.dev.MAC()
}

// startDHCP starts the DHCP server of --dhcp on the host port: dnsmasq, run
// by a keeper (this binary, still privileged) that stops it and removes
// its lease file when tapfwd ends, however it ends. A persistent TAP keeps
// its lease file.
func (d *daemon) startDHCP() error {
	if !d.c.DHCPFirst.IsValid() {
		return nil
	}
	if _, err := dhcp.Find(); err != nil {
		return fmt.Errorf("--dhcp: %w", err)
	}
	label, err := netns.Label(d.dev.Netns())
	if err != nil {
		return err
	}
	c := dhcp.Config{Netns: d.dev.Netns(), Interface: d.host.Name, First: d.c.DHCPFirst, Last: d.c.DHCPLast,
		LeaseFile: dhcp.LeaseFile(label, d.dev.Name()), KeepLeases: d.dev.Persistent()}
	k, err := startKeeper(c, d.log)
	if err != nil {
		return fmt.Errorf("--dhcp: %w", err)
	}
	d.closing("stopping the DHCP server", k.stop)
	d.log.Info("DHCP server", "range", c.First.String()+"-"+c.Last.String(), "interface", c.Interface,
		"leases", c.LeaseFile, "dnsmasq_pid", k.pid, "dnsmasq", strings.Join(dhcp.Args(c), " "))
	return nil
}

// removeLeases removes the lease file a persistent TAP's DHCP server kept
// (tapfwd down).
func removeLeases(ns, tapName string) error {
	label, err := netns.Label(ns)
	if err != nil {
		return err
	}
	if err := os.Remove(dhcp.LeaseFile(label, tapName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// keeper is the process that runs dnsmasq for tapfwd: `tapfwd dhcp-keeper`.
type keeper struct {
	log     *slog.Logger
	hold    *os.File // its stdin: closing it, or tapfwd's end, stops it
	exited  chan struct{}
	stopped atomic.Bool
	pid     int // dnsmasq's
}

// keeperTimeout bounds the keeper's start (dnsmasq's own start is bounded
// shorter, in package dhcp) and its stop.
const keeperTimeout = 20 * time.Second

// startKeeper starts the keeper for c and waits until dnsmasq runs. The
// keeper's stderr carries dnsmasq's log, logged here line by line.
func startKeeper(c dhcp.Config, log *slog.Logger) (_ *keeper, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer inR.Close()
	stR, stW, err := os.Pipe()
	if err != nil {
		inW.Close()
		return nil, err
	}
	defer stR.Close()
	logR, logW, err := os.Pipe()
	if err != nil {
		inW.Close()
		stW.Close()
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", "dhcp-keeper")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, stW, logW
	// Its own process group: a Ctrl-C to tapfwd's does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	stW.Close()
	logW.Close()
	if err != nil {
		inW.Close()
		logR.Close()
		return nil, fmt.Errorf("starting the DHCP keeper: %w", err)
	}
	k := &keeper{log: log, hold: inW, exited: make(chan struct{})}
	go k.relay(logR)
	go func() { cmd.Wait(); close(k.exited) }()
	defer func() {
		if err != nil {
			k.stop()
		}
	}()
	if err := json.NewEncoder(inW).Encode(c); err != nil {
		return nil, fmt.Errorf("telling the DHCP keeper: %w", err)
	}
	status := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stR).ReadString('\n')
		status <- strings.TrimSpace(line)
	}()
	select {
	case line := <-status:
		if pid, ok := strings.CutPrefix(line, "ready "); ok {
			k.pid, _ = strconv.Atoi(pid)
			go k.watch()
			return k, nil
		}
		if msg, ok := strings.CutPrefix(line, "error "); ok {
			return nil, errors.New(msg)
		}
		return nil, errors.New("the DHCP keeper exited without a word")
	case <-time.After(keeperTimeout):
		cmd.Process.Kill()
		return nil, fmt.Errorf("the DHCP keeper did not answer within %v", keeperTimeout)
	}
}

// relay logs dnsmasq's lines.
func (k *keeper) relay(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k.log.Info("dnsmasq", "line", sc.Text())
	}
}

// watch warns when the keeper ends before it was told to.
func (k *keeper) watch() {
	<-k.exited
	if !k.stopped.Load() {
		k.log.Warn("the DHCP server stopped: guests get no new leases")
	}
}

// stop tells the keeper to stop dnsmasq and waits for it.
func (k *keeper) stop() error {
	k.stopped.Store(true)
	k.hold.Close()
	select {
	case <-k.exited:
		return nil
	case <-time.After(keeperTimeout):
		return errors.New("the DHCP keeper did not stop in time")
	}
}

// cmdDHCPKeeper is `tapfwd dhcp-keeper` (not listed): it reads a dhcp.Config
// from stdin, starts dnsmasq, writes "ready PID" (or "error WHY") as a
// line on stdout, relays dnsmasq's log on stderr, and when stdin closes
// (tapfwd stopped or died) stops dnsmasq and removes the lease file.
func cmdDHCPKeeper(stdin io.Reader, stdout, stderr io.Writer) error {
	// SIGPIPE too: once tapfwd is gone, relaying dnsmasq's last lines to
	// it must not end the keeper before it has cleaned up.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	var c dhcp.Config
	if err := json.NewDecoder(stdin).Decode(&c); err != nil {
		return fmt.Errorf("dhcp-keeper: reading the configuration: %w", err)
	}
	s, err := dhcp.Start(c, func(line string) { fmt.Fprintln(stderr, line) })
	if err != nil {
		fmt.Fprintf(stdout, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return nil
	}
	fmt.Fprintf(stdout, "ready %d\n", s.Pid())
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-s.Done():
		fmt.Fprintf(stderr, "dnsmasq exited: %v\n", s.Err())
	}
	return s.Stop()
}
