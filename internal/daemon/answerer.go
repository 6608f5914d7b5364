package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/tapfwd/tapfwd/internal/base/procfs"
)

// Answerer is the process that answered FetchStatus, as far as /proc
// tells this process. The metrics address is an ordinary port: while
// tapfwd is down any local user may bind it and serve a /status of their
// own, so tapfwd status says whose answer it prints.
type Answerer struct {
	Addr  netip.AddrPort // where it answered: the server's end of the connection
	Procs []AnswerProc   // the processes that hold that end; none when not known
	// Unknown says why Procs is empty.
	Unknown string
}

// AnswerProc is a process holding the server's end of the connection.
type AnswerProc struct {
	Pid  int
	Comm string // as /proc/PID/comm has it: the process may have set it
	User string // the owner's name, or its uid when it has none
}

// String is "at ADDR by pid N (COMM, user U)", or "at ADDR by a process
// not known: WHY"; the names are made printable.
func (a *Answerer) String() string {
	if len(a.Procs) == 0 {
		return fmt.Sprintf("at %v by a process not known: %s", a.Addr, printable(a.Unknown))
	}
	var ps []string
	for _, p := range a.Procs {
		ps = append(ps, fmt.Sprintf("pid %d (%s, user %s)", p.Pid, printable(p.Comm), printable(p.User)))
	}
	return fmt.Sprintf("at %v by %s", a.Addr, strings.Join(ps, " and "))
}

// answerer finds who holds the far end of the connection from local to
// remote: its socket among this namespace's TCP sockets, then the
// processes whose open files include it.
func answerer(local, remote net.Addr) *Answerer {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return &Answerer{Unknown: fmt.Sprintf("not a TCP connection (%v)", remote)}
	}
	lap, rap := unmapped(l.AddrPort()), unmapped(r.AddrPort())
	a := &Answerer{Addr: rap}
	socks, err := procfs.TCPSockets()
	if err != nil {
		a.Unknown = err.Error()
		return a
	}
	var inode uint64
	for _, s := range socks {
		if unmapped(s.Local) == rap && unmapped(s.Remote) == lap {
			inode = s.Inode
		}
	}
	if inode == 0 {
		a.Unknown = "its end of the connection is not among this network namespace's sockets, or no file holds it"
		return a
	}
	for _, pid := range procfs.SocketOwners(map[uint64]bool{inode: true})[inode] {
		a.Procs = append(a.Procs, answerProc(pid))
	}
	if len(a.Procs) == 0 {
		a.Unknown = fmt.Sprintf("socket %d is held by no process whose open files this user may read (root may)", inode)
	}
	return a
}

func unmapped(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// answerProc reads pid's name and owner; what cannot be read is "?".
func answerProc(pid int) AnswerProc {
	p := AnswerProc{Pid: pid, Comm: "?", User: "?"}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		p.Comm = strings.TrimSuffix(string(b), "\n")
	}
	if fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			p.User = strconv.FormatUint(uint64(st.Uid), 10)
			if u, err := user.LookupId(p.User); err == nil {
				p.User = u.Username
			}
		}
	}
	return p
}

// listeners names the processes that listen on addr (IP:PORT) in this
// network namespace, for a bind that found it in use: "pid 12 (tapfwd run
// --config /etc/tapfwd/lab1.conf)", with " and " between several; empty
// when /proc does not tell.
func listeners(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	socks, err2 := procfs.TCPSockets()
	if err != nil || err2 != nil {
		return ""
	}
	want := unmapped(ap)
	inodes := map[uint64]bool{}
	for _, s := range socks {
		local := unmapped(s.Local)
		sameAddr := local.Addr() == want.Addr() || local.Addr().IsUnspecified() || want.Addr().IsUnspecified()
		if s.Inode != 0 && s.Remote.Port() == 0 && local.Port() == want.Port() && sameAddr {
			inodes[s.Inode] = true
		}
	}
	var ps []string
	for _, pids := range procfs.SocketOwners(inodes) {
		for _, pid := range pids {
			cmd := "?"
			if args, err := procfs.Cmdline(pid); err == nil {
				cmd = strings.Join(args, " ")
			}
			ps = append(ps, fmt.Sprintf("pid %d (%s)", pid, printable(cmd)))
		}
	}
	return strings.Join(ps, " and ")
}
