package dhcp

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/rootdir"
	"github.com/tapfwd/tapfwd/netns"
)

// Dir holds the lease files: Dir/TAP.leases for a lab in the initial
// network namespace, Dir/NS:TAP.leases for one in namespace NS.
const Dir = "/run/tapfwd/dhcp"

// Errors callers test for with errors.Is.
var (
	// ErrNoDnsmasq means dnsmasq is not installed.
	ErrNoDnsmasq = errors.New("dnsmasq not found")
	// ErrStart means dnsmasq exited, or did not say it had started, at
	// start; the error says dnsmasq's reason.
	ErrStart = errors.New("dnsmasq did not start")
	// ErrInterfaceName means the interface's name is one dnsmasq would
	// read as something else.
	ErrInterfaceName = errors.New("a name dnsmasq cannot take")
	// ErrUnsafeDir means Dir is not a root-owned directory only root may
	// write to; no lease file is put there. It is tapport.ErrUnsafeDir too.
	ErrUnsafeDir = rootdir.ErrUnsafe
)

// Config is a DHCP server for one lab segment: dnsmasq on the lab host's
// port, handing out addresses from First to Last, nothing else.
type Config struct {
	// Netns is the network namespace of the interface (a /run/netns name;
	// "" for the caller's). dnsmasq runs in it.
	Netns string
	// Interface is where dnsmasq serves, and only there: the host port,
	// whose address says the subnet and netmask.
	Interface   string
	First, Last netip.Addr
	// LeaseFile is dnsmasq's lease database (LeaseFile gives the path).
	LeaseFile string
	// KeepLeases leaves the lease file when the server stops, for a lab
	// that persists: the next server knows the guests' leases.
	KeepLeases bool
	// Binary is dnsmasq's path; "" looks it up (Find).
	Binary string
}

// LeaseFile is the lease file of the lab on TAP tapName in the namespace
// labelled label (netns.NS.Label: "" for the initial one).
func LeaseFile(label, tapName string) string {
	if label == "" {
		return filepath.Join(Dir, tapName+".leases")
	}
	return filepath.Join(Dir, label+":"+tapName+".leases")
}

// Args are dnsmasq's arguments for c: in the foreground, no configuration
// file, no DNS (port 0), DHCP on c.Interface only (its sockets bound to
// it), the range with dnsmasq's default lease time (1h), no router and no
// DNS server offered, no PID file, its log on stderr.
func Args(c Config) []string {
	return []string{
		"--keep-in-foreground",
		"--conf-file=/dev/null",
		"--port=0",
		"--bind-dynamic",
		"--interface=" + c.Interface,
		"--dhcp-range=" + c.First.String() + "," + c.Last.String(),
		"--dhcp-leasefile=" + c.LeaseFile,
		"--dhcp-option=3",
		"--dhcp-option=6",
		"--pid-file=",
		"--log-facility=-",
	}
}

// CheckInterface refuses an interface name dnsmasq would misread: it cuts
// its interface option at commas into a list and takes a '*' as a
// wildcard matching every name with the same start (dnsmasq's option.c,
// util.c: wildcard_match), so "lab,eth0h" would serve on eth0h too. Linux
// takes almost any byte in a name; dnsmasq here gets names of ASCII
// letters, digits, '.', '-' and '_' only.
func CheckInterface(name string) error {
	ok := name != ""
	for _, c := range []byte(name) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_')
	}
	if !ok {
		return fmt.Errorf("DHCP interface name %q: %w (it splits its interface list at commas and reads '*' as a wildcard): want ASCII letters, digits, '.', '-' and '_'",
			name, ErrInterfaceName)
	}
	return nil
}

// Find returns dnsmasq's path: on $PATH, else in /usr/sbin or /sbin (a
// user's $PATH may lack them).
func Find() (string, error) {
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/dnsmasq", "/sbin/dnsmasq"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w on $PATH or in /usr/sbin: install it (Debian and Ubuntu: apt-get install dnsmasq-base)", ErrNoDnsmasq)
}

// ParseRange parses "FIRST-LAST", two IPv4 addresses, FIRST not after
// LAST.
func ParseRange(s string) (first, last netip.Addr, err error) {
	a, b, ok := strings.Cut(s, "-")
	if ok {
		first, err = netip.ParseAddr(strings.TrimSpace(a))
		if err == nil {
			last, err = netip.ParseAddr(strings.TrimSpace(b))
		}
	}
	switch {
	case !ok || err != nil || !first.Is4() || !last.Is4():
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("DHCP range %q: want FIRST-LAST, two IPv4 addresses, e.g. 198.18.1.100-198.18.1.150", s)
	case last.Less(first):
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("DHCP range %q: %s comes after %s", s, first, last)
	}
	return first, last, nil
}

// CheckRange checks that first..last lies in host's IPv4 subnet, clear of
// its network and broadcast addresses and of host's own address.
func CheckRange(host netip.Prefix, first, last netip.Addr) error {
	if !host.Addr().Is4() {
		return fmt.Errorf("the host's address %s is not IPv4: dnsmasq hands out addresses in the host port's IPv4 subnet", host)
	}
	sub := host.Masked()
	for _, a := range []netip.Addr{first, last} {
		if !sub.Contains(a) {
			return fmt.Errorf("DHCP range: %s is outside the host's subnet %s", a, sub)
		}
	}
	bcast := lastAddr(sub)
	switch {
	case host.Bits() < 31 && (first == sub.Addr() || last == bcast):
		return fmt.Errorf("DHCP range %s-%s takes the network or broadcast address of %s", first, last, sub)
	case !host.Addr().Less(first) && !last.Less(host.Addr()):
		return fmt.Errorf("DHCP range %s-%s takes the host's own address %s", first, last, host.Addr())
	}
	return nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// ensureDirs makes dirs, each in the one before (Dir and its parent),
// when missing and checks them: root-owned directories only root may
// write to (rootdir.Ensure), as dnsmasq opens the lease file as root. It
// returns those it made, for removeEmpty.
func ensureDirs(dirs ...string) (made []string, err error) {
	for _, d := range dirs {
		_, missing := os.Lstat(d)
		if err := rootdir.Ensure(d); err != nil {
			return made, fmt.Errorf("DHCP lease directory: %w", err)
		}
		if missing != nil {
			made = append(made, d)
		}
	}
	return made, nil
}

// removeEmpty removes the directories ensureDirs made, innermost first,
// those still empty: another lab's lease file keeps them.
func removeEmpty(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		if os.Remove(made[i]) != nil {
			return
		}
	}
}

// startTimeout bounds how long dnsmasq may take to say it started.
const startTimeout = 15 * time.Second

// Server is a running dnsmasq.
type Server struct {
	c    Config
	cmd  *exec.Cmd
	done chan struct{} // closed once dnsmasq exited and was reaped
	err  error         // its exit, once done

	mu       sync.Mutex
	last     string // its last line
	stopOnce sync.Once
	stopErr  error
	made     []string // the directories Start made for the lease file
}

// Start starts dnsmasq for c in c.Netns and waits until it says it has
// started (it binds its sockets and opens the lease file before). Each
// line dnsmasq logs goes to log, from another goroutine. A dnsmasq that
// exits first is ErrStart with its last line.
func Start(c Config, log func(line string)) (*Server, error) {
	bin := c.Binary
	if bin == "" {
		var err error
		if bin, err = Find(); err != nil {
			return nil, err
		}
	}
	if c.Interface == "" || c.LeaseFile == "" || !c.First.IsValid() || !c.Last.IsValid() {
		return nil, errors.New("a DHCP server needs an interface, a range and a lease file")
	}
	if err := CheckInterface(c.Interface); err != nil {
		return nil, err
	}
	s := &Server{c: c, done: make(chan struct{})}
	if filepath.Dir(c.LeaseFile) == Dir {
		var err error
		if s.made, err = ensureDirs(filepath.Dir(Dir), Dir); err != nil {
			removeEmpty(s.made)
			return nil, err
		}
	}
	s.cmd = exec.Command(bin, Args(c)...)
	s.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	// dnsmasq logs on stderr (--log-facility=-); stdout stays quiet.
	out, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start dnsmasq: %w", err)
	}
	// A thread inside the namespace forks dnsmasq: the child inherits the
	// thread's network namespace.
	if err := netns.Do(c.Netns, s.cmd.Start); err != nil {
		out.Close()
		removeEmpty(s.made)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	started := make(chan struct{})
	go s.read(bufio.NewScanner(out), started, log)
	select {
	case <-started:
		return s, nil
	case <-s.done:
	case <-time.After(startTimeout):
		s.Stop()
		return nil, fmt.Errorf("%w within %v on %s (its last line: %q)", ErrStart, startTimeout, c.Interface, s.lastLine())
	}
	s.removeLeases()
	return nil, fmt.Errorf("%w on %s: %s (%v)", ErrStart, c.Interface, s.lastLine(), s.err)
}

// read passes dnsmasq's lines to log, closes started at its "started"
// line, and reaps it when its stderr closes.
func (s *Server) read(sc *bufio.Scanner, started chan struct{}, log func(string)) {
	once := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		s.mu.Lock()
		s.last = line
		s.mu.Unlock()
		if log != nil {
			log(line)
		}
		// dnsmasq.c logs "started, version V ..." once its sockets are
		// bound and its lease file open; errors before that end it.
		if !once && strings.Contains(line, "]: started, version ") {
			close(started)
			once = true
		}
	}
	s.err = s.cmd.Wait()
	close(s.done)
}

func (s *Server) lastLine() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimPrefix(s.last, "dnsmasq: ")
}

// Done is closed once dnsmasq has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is how dnsmasq exited, once Done is closed.
func (s *Server) Err() error {
	<-s.done
	return s.err
}

// Pid is dnsmasq's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends dnsmasq (SIGTERM, SIGKILL after 5 s) and removes the lease
// file unless Config.KeepLeases, with the directories Start made for it
// when they are left empty. It may be called again.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
				s.cmd.Process.Kill()
				<-s.done
			}
		}
		s.stopErr = s.removeLeases()
	})
	return s.stopErr
}

// removeLeases removes the lease file, and the directories Start made
// for it once they are empty.
func (s *Server) removeLeases() error {
	if s.c.KeepLeases {
		return nil
	}
	if err := os.Remove(s.c.LeaseFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the DHCP lease file: %w", err)
	}
	removeEmpty(s.made)
	return nil
}
