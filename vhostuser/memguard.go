package vhostuser

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser/internal/shm"
)

// Guest memory a front-end makes the process pay for.
//
// A page of a memfd (tmpfs) that nobody has touched is a hole: it costs
// nothing until the first access through a shared mapping, which
// allocates it and charges it to the memory cgroup of the process that
// faulted. The port touches guest memory where descriptors point, so a
// front-end that sends SET_MEM_TABLE for a huge sparse file and posts
// transmit chains into its holes makes this process allocate, and pay
// for, memory that the front-end never touched (2 GiB from 32,768 frames
// of 65,000 bytes, while the front-end's own RSS stayed at 4 MB). The
// kernel's vhost-net avoids this by faulting in the owner's mm and cgroup;
// DPDK's vhost library and QEMU's libvhost-user map regions as the port
// does (MAP_SHARED, DPDK even MAP_POPULATE with async copy) and pay.
//
// What does not work: reading through MAP_PRIVATE allocates all the same
// (a shmem read fault adds the page to the file; only anonymous memory
// maps the zero page); refusing chains into holes (SEEK_HOLE, mincore) is
// a system call per frame and races with a front-end that punches a hole
// after the check; and a guest legitimately posts receive buffers in
// memory it never touched, which the port must write.
//
// What the port does: it bounds, per port, the guest memory that this
// process alone holds resident, the pages of its mappings of the port's
// regions that no other process maps (smaps' Private_Clean and
// Private_Dirty). A real guest's memory is mapped by its front-end (QEMU
// maps every page its guest touched, a DPDK front-end the buffers it
// wrote), so its pages count only while the port alone holds them: receive
// buffers written and not yet read. Pages the port faulted in from holes
// stay private to it. A process-wide sampler, off the data path, reads
// the process's RssShmem (/proc/self/status) every memPoll and walks
// /proc/self/smaps when it grew by memWalkStep (pages charged to the
// process only ever appear there as its RssShmem grows) or every
// memWalkEvery regardless. A port over its budget sends its front-end
// away. A table the port stops using (SET_MEM_TABLE, disconnection) is
// measured before it is unmapped (a walk, or, within memPoll of the last
// measure, that measure plus all RssShmem grew since) and what it held
// alone is carried: pages faulted from holes stay in the front-end's
// file, charged to this process, after the port unmaps them, so remapping
// or reconnecting must not reset the count. While the carried amount is
// over the budget the port turns front-ends away. A disconnected
// front-end whose process has exited carries nothing: its memory goes
// with it (and QEMU's exit leaves every page the port still maps private
// to the port for a moment).
//
// Limits: the bound is the budget plus what a front-end makes the port
// fault in between two samples (memPoll, at a few GiB/s at most). A
// front-end can hide pages by mapping them itself after the port faulted
// them in (they then count in its own RSS), by handing its memfd to
// another process before exiting, or by giving two ports of this process
// the same file (a page both map is not private); hugetlbfs memory is not
// counted (its pool is reserved up front). The data path is untouched: no
// system call per frame.

// DefaultMemoryBudget is Config.MemoryBudget's default: 256 MiB.
const DefaultMemoryBudget = 256 << 20

const (
	memPoll      = 100 * time.Millisecond
	memWalkStep  = 16 << 20 // RssShmem growth that makes the sampler walk smaps
	memWalkEvery = 5 * time.Second
)

// budget is the port's memory budget in bytes; 0: none.
func (p *Port) budget() uint64 {
	switch b := p.cfg.MemoryBudget; {
	case b == 0:
		return DefaultMemoryBudget
	case b < 0:
		return 0
	default:
		return uint64(b)
	}
}

// memGuard is the process's sampler. Its files stay open (a process that
// dropped its privileges may read its own), and in steady state it
// allocates nothing.
type memGuard struct {
	mu       sync.Mutex
	ports    map[*Port]struct{}
	started  bool
	base     uint64 // RssShmem at the last walk, or lower since
	lastWalk time.Time
	// the sampler's own: the ports and mappings it checks
	list    []*Port
	checked []vma

	// readMu: the files and the buffers they are read into.
	readMu        sync.Mutex
	status, smaps procFile
	vmas          []vma
}

var memGuardian = memGuard{ports: make(map[*Port]struct{})}

// watch starts watching p (the sampler starts with the first port; where
// /proc cannot be read, budgets are not enforced).
func (g *memGuard) watch(p *Port) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ports[p] = struct{}{}
	if g.started {
		return
	}
	g.started = true
	g.readMu.Lock()
	defer g.readMu.Unlock()
	if g.status.open("/proc/self/status") && g.smaps.open("/proc/self/smaps") {
		go g.run()
	}
}

func (g *memGuard) forget(p *Port) {
	g.mu.Lock()
	delete(g.ports, p)
	g.mu.Unlock()
}

func (g *memGuard) run() {
	for range time.Tick(memPoll) {
		g.tick()
	}
}

// tick walks smaps if something may have changed and checks every port's
// budget.
func (g *memGuard) tick() {
	g.readMu.Lock()
	rss, ok := g.rssShmem()
	now := time.Now()
	g.mu.Lock()
	g.base = min(g.base, rss)
	walk := !ok || rss >= g.base+memWalkStep || now.Sub(g.lastWalk) >= memWalkEvery
	g.list = g.list[:0]
	for p := range g.ports {
		g.list = append(g.list, p)
	}
	if walk {
		g.base, g.lastWalk = rss, now
	}
	g.mu.Unlock()
	walked := walk && g.readSmaps()
	if walked {
		g.checked = append(g.checked[:0], g.vmas...)
	}
	// A port's retire holds its lock and takes readMu: let go of readMu
	// before taking a port's.
	g.readMu.Unlock()
	if walked {
		for _, p := range g.list {
			p.checkBudget(g.checked, rss, now)
		}
	}
	clear(g.list)
}

// checkBudget measures what the port alone holds of its guest memory and
// sends the front-end away if that, with what earlier tables left, is over
// its budget.
func (p *Port) checkBudget(vmas []vma, rss uint64, now time.Time) {
	p.mu.RLock()
	h := privateIn(vmas, &p.mem)
	p.setHeld(h, rss, now)
	p.mu.RUnlock()
	b, carried := p.budget(), p.carried.Load()
	if b == 0 || h+carried <= b {
		return
	}
	p.connMu.Lock()
	c := p.conn
	p.connMu.Unlock()
	if c == nil || !p.overBudget.CompareAndSwap(false, true) {
		return
	}
	p.stats.memoryOverBudget.Add(1)
	p.plog.Error("vhost-user front-end sent away: the memory of its guest that only this process holds is over "+
		"the port's budget (memory the front-end never touched, faulted in by the port)",
		"held_bytes", h, "carried_bytes", carried, "budget_bytes", b)
	_ = c.Close()
}

// setHeld records a measure of what the port alone holds of its current
// table, with the process's RssShmem then.
func (p *Port) setHeld(bytes, rss uint64, at time.Time) {
	p.heldBytes.Store(bytes)
	p.heldRss.Store(rss)
	p.heldAt.Store(at.UnixNano())
}

// retire unmaps t, a table the port stops using, and carries what the
// port alone held of it unless the front-end that gave it (peer) exited.
// Under the write lock.
func (p *Port) retire(t *memTable, peer peerProc) {
	g := &memGuardian
	g.readMu.Lock()
	defer g.readMu.Unlock()
	if t.n > 0 && p.budget() != 0 && !peer.exited() {
		p.carried.Add(p.heldNow(t))
	}
	t.unmap()
	rss, _ := g.rssShmem()
	p.setHeld(0, rss, time.Now()) // a new mapping holds nothing yet
}

// heldNow is what the port alone holds of t, its current table: walked
// now, or, when it was measured less than memPoll ago (a front-end that
// sends table after table must not make each cost a walk), that measure
// plus all the process's RssShmem grew by since. Under readMu.
func (p *Port) heldNow(t *memTable) uint64 {
	g := &memGuardian
	rss, ok := g.rssShmem()
	if ok && time.Since(time.Unix(0, p.heldAt.Load())) < memPoll {
		return p.heldBytes.Load() + rss - min(rss, p.heldRss.Load())
	}
	if !g.readSmaps() {
		return p.budget() + 1 // cannot tell: count the worst
	}
	return privateIn(g.vmas, t)
}

// budgetSpent says whether earlier front-ends left more memory held by
// this process than the port's budget: new ones are turned away.
func (p *Port) budgetSpent() bool {
	b := p.budget()
	return b != 0 && p.carried.Load() > b
}

// vma is one mapping of /proc/self/smaps: its range and the bytes of it
// that no other mapping shares.
type vma struct{ start, end, private uint64 }

// privateIn adds up the private bytes of the mappings of t.
func privateIn(vmas []vma, t *memTable) uint64 {
	var sum uint64
	for i := range t.n {
		m := t.regions[i].mapping
		if m == nil {
			continue
		}
		lo := uint64(shm.Addr(m))
		hi := lo + uint64(len(m))
		for _, v := range vmas {
			if v.start >= lo && v.end <= hi {
				sum += v.private
			}
		}
	}
	return sum
}

// readSmaps reads the process's mappings into g.vmas. Under readMu.
func (g *memGuard) readSmaps() bool {
	b, ok := g.smaps.read()
	if !ok {
		return false
	}
	g.vmas = g.vmas[:0]
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		name, rest, _ := bytes.Cut(line, []byte(" "))
		if n := len(name); n > 0 && name[n-1] != ':' {
			if lo, hi, ok := bytes.Cut(name, []byte("-")); ok {
				g.vmas = append(g.vmas, vma{start: parseUint(lo, 16), end: parseUint(hi, 16)})
			}
			continue
		}
		if len(g.vmas) > 0 && (string(name) == "Private_Clean:" || string(name) == "Private_Dirty:") {
			g.vmas[len(g.vmas)-1].private += kB(rest)
		}
	}
	return true
}

// rssShmem is the process's RssShmem in bytes. Under readMu.
func (g *memGuard) rssShmem() (uint64, bool) {
	b, ok := g.status.read()
	if !ok {
		return 0, false
	}
	_, rest, ok := bytes.Cut(b, []byte("\nRssShmem:"))
	if !ok {
		return 0, false
	}
	rest, _, _ = bytes.Cut(rest, []byte("\n"))
	return kB(rest), true
}

// kB parses "   1234 kB" into bytes.
func kB(s []byte) uint64 { return parseUint(bytes.TrimLeft(s, " \t"), 10) << 10 }

// parseUint parses the leading digits of s in base 10 or 16.
func parseUint(s []byte, base uint64) uint64 {
	var n uint64
	for _, c := range s {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return n
		}
		n = n*base + d
	}
	return n
}

// procFile is a /proc file kept open and read again from the start.
type procFile struct {
	fd  int
	buf []byte
}

func (f *procFile) open(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f.fd, f.buf = fd, make([]byte, 64<<10)
	return true
}

// read returns the file's contents, in a buffer the next read reuses.
func (f *procFile) read() ([]byte, bool) {
	n := 0
	for {
		if n == len(f.buf) {
			f.buf = append(f.buf, make([]byte, len(f.buf))...)
		}
		m, err := unix.Pread(f.fd, f.buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if m == 0 {
			return f.buf[:n], true
		}
		n += m
	}
}

// peerProc is the process of a connected front-end: its pid and start
// time (/proc/PID/stat), which tell it from a later process of that pid.
type peerProc struct {
	pid   int
	start string
}

var noPeer = peerProc{}

// peerOfConn finds the process at the other end of socket fd.
func peerOfConn(fd int) peerProc {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || cred.Pid <= 0 {
		return noPeer
	}
	_, start := procState(int(cred.Pid))
	return peerProc{pid: int(cred.Pid), start: start}
}

// exited says whether the process exited or is exiting: gone, a zombie,
// or without memory (/proc/PID/status without VmRSS: an exiting process
// releases its memory before its fds, so a front-end that dies is seen
// without memory by the time its socket ends). A peer the port could not
// identify has not exited.
func (pp peerProc) exited() bool {
	if pp.pid == 0 || pp.start == "" {
		return false
	}
	state, start := procState(pp.pid)
	if start != pp.start || state == "Z" || state == "X" {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pp.pid) + "/status")
	return err != nil || !bytes.Contains(b, []byte("\nVmRSS:"))
}

// procState reads the state and start time of process pid ("" if gone).
func procState(pid int) (state, start string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", ""
	}
	// comm, in parentheses, may hold anything: the fields start after the last ')'
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	if len(f) < 20 {
		return "", ""
	}
	return string(f[0]), string(f[19]) // fields 3 and 22
}
