package cpuprofile

import (
	"cmp"
	"slices"
	"strings"
)

// Share is a part of a profile's CPU time.
type Share struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Percent float64 `json:"percent"`
}

// The shares of tapfwd's Go CPU profile (GoShares). A system call's
// share holds the kernel's time inside it, which the profile charges to
// the call: a TAP write runs the lab's receive path (the NAPI poll, IP,
// TCP or UDP, the wake-up of the reader) inside it, a packet socket send
// the wire's.
const (
	TAPWrite     = "TAP write (system call; the lab's receive path inside it)"
	TAPRead      = "TAP read (system call)"
	NICRecv      = "packet socket recv (system call)"
	NICSend      = "packet socket send (system call; the wire's receive path inside it)"
	Wait         = "waiting for frames (ppoll, netpoll)"
	BusyPoll     = "waiting with the kernel busy-polling the NIC (io_uring_enter: --poll kernel, --busy-poll-cpu)"
	OtherSyscall = "other system calls"
	Copies       = "copies and clears (memmove, memclr)"
	Frames       = "vnet headers, GRO, segmentation, checksums (vnethdr, offload)"
	Worker       = "the worker's own code (forward, tap, afpacket)"
	Runtime      = "Go runtime and scheduler"
	Other        = "other (metrics, profiler, logging)"
)

// GoShareNames are the shares GoShares gives, in the order it gives them.
var GoShareNames = []string{TAPWrite, TAPRead, NICRecv, NICSend, Wait, BusyPoll, OtherSyscall, Copies, Frames, Worker, Runtime, Other}

// module is the import path every tapfwd package starts with.
const module = "github.com/tapfwd/tapfwd/"

// GoShares groups p's samples (a Go CPU profile of tapfwd) into the
// shares of GoShareNames, every one of them, in that order.
func GoShares(p *CPUProfile) []Share {
	return shares(p, GoShareNames, goShare)
}

func shares(p *CPUProfile, names []string, classify func([]string) string) []Share {
	sec := map[string]float64{}
	for _, s := range p.Samples {
		sec[classify(s.Stack)] += float64(s.Nanos) / 1e9
	}
	total := p.Total().Seconds()
	out := make([]Share, len(names))
	for i, n := range names {
		out[i] = Share{Name: n, Seconds: sec[n], Percent: Percent(sec[n], total)}
	}
	return out
}

// goShare is the share of a Go stack (leaf first): a system call by the
// tapfwd function that made it; else by the leaf's package.
func goShare(stack []string) string {
	if len(stack) == 0 {
		return Other
	}
	leaf := stack[0]
	pkg := packageOf(leaf)
	switch {
	case isSyscall(leaf):
		return syscallSite(stack)
	case strings.HasPrefix(leaf, "runtime.mem"):
		return Copies
	case pkg == module+"vnethdr" || pkg == module+"offload" || strings.Contains(strings.ToLower(leaf), "segment"):
		return Frames
	case strings.HasPrefix(pkg, module):
		return Worker
	case pkg == "runtime" || strings.HasPrefix(pkg, "internal/runtime/"):
		return Runtime
	}
	return Other
}

// isSyscall reports whether f enters the kernel or is the runtime's
// bookkeeping around that (entersyscall, exitsyscall), which a system
// call costs as well.
func isSyscall(f string) bool {
	for _, p := range []string{"syscall.Syscall", "syscall.RawSyscall", "syscall.rawSyscall", "syscall.rawVforkSyscall",
		"internal/runtime/syscall/linux.Syscall", "internal/runtime/syscall.Syscall", "runtime/internal/syscall.Syscall",
		"golang.org/x/sys/unix.Syscall", "golang.org/x/sys/unix.RawSyscall", "runtime.entersyscall", "runtime.exitsyscall",
		"runtime.reentersyscall"} {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}

// syscallSite is the share of a system call by the first function of
// tapfwd's I/O on the stack that made it (or the runtime's poller).
func syscallSite(stack []string) string {
	for _, f := range stack {
		pkg, method := packageOf(f), methodOf(f)
		read, write := strings.HasPrefix(strings.ToLower(method), "read"), strings.HasPrefix(strings.ToLower(method), "write")
		switch {
		case f == "golang.org/x/sys/unix.Ppoll" || strings.HasPrefix(f, "runtime.netpoll") || f == "golang.org/x/sys/unix.EpollWait":
			return Wait
		case pkg == module+"tap" && write:
			return TAPWrite
		case pkg == module+"tap" && read:
			return TAPRead
		case (pkg == module+"afpacket" || pkg == module+"afxdp") && write:
			return NICSend
		case (pkg == module+"afpacket" || pkg == module+"afxdp") && read:
			return NICRecv
		}
	}
	// internal/base/uring's own calls, with no TAP I/O above them: the NAPI
	// busy poll of a worker's wait or of the --busy-poll-cpu thread.
	if slices.ContainsFunc(stack, func(f string) bool { return packageOf(f) == module+"internal/base/uring" }) {
		return BusyPoll
	}
	return OtherSyscall
}

// packageOf is the import path of function name f
// ("github.com/tapfwd/tapfwd/tap.(*Queue).Write": ".../tap").
func packageOf(f string) string {
	slash := strings.LastIndexByte(f, '/')
	dot := strings.IndexByte(f[slash+1:], '.')
	if dot < 0 {
		return f
	}
	return f[:slash+1+dot]
}

// methodOf is the last element of function name f ("Write").
func methodOf(f string) string {
	return f[strings.LastIndexByte(f, '.')+1:]
}

// SyscallSites are the functions of tapfwd that made the system calls of
// p, by the time spent in the calls under them (the first tapfwd function
// above each), most first: where the syscall shares come from.
func SyscallSites(p *CPUProfile, n int) []FuncTime {
	sec := map[string]float64{}
	for _, s := range p.Samples {
		if len(s.Stack) == 0 || !isSyscall(s.Stack[0]) {
			continue
		}
		site := "(outside tapfwd's packages)"
		for _, f := range s.Stack {
			if strings.HasPrefix(f, module) {
				site = f
				break
			}
		}
		sec[site] += float64(s.Nanos) / 1e9
	}
	total := p.Total().Seconds()
	var out []FuncTime
	for f, v := range sec {
		out = append(out, FuncTime{Name: f, Flat: v, FlatPct: Percent(v, total)})
	}
	slices.SortFunc(out, func(a, b FuncTime) int { return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(a.Name, b.Name)) })
	return out[:min(n, len(out))]
}
