package vhostuser_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// rssShmem is the process's RssShmem in bytes (/proc/PID/status; 0: this
// process).
func rssShmem(t testing.TB, pid int) uint64 {
	t.Helper()
	p := "self"
	if pid != 0 {
		p = strconv.Itoa(pid)
	}
	b, err := os.ReadFile("/proc/" + p + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "RssShmem:" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n << 10
		}
	}
	t.Fatalf("no RssShmem in /proc/%s/status", p)
	return 0
}

// drain reads the port's first queue until the test ends, as a forwarder's
// worker would.
func drain(t *testing.T, p *testPort) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b, sizes := bufs(64, 70000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := p.Read(b, sizes, 0); errors.Is(err, unix.EAGAIN) || errors.Is(err, vhostuser.ErrBroken) {
				pollFd(p.Fd(), 10*time.Millisecond)
			} else if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

const (
	holeFrames = 4096  // 256 MiB of holes, a frame per 64 KiB
	holeStride = 65536 // each frame on pages of its own
	holeFrame  = 65000
)

// TestMemoryBudgetHoles (issue 35, item 2): a front-end whose memory file
// is 4 GiB of holes posts transmit chains into them, 4,096 frames of
// 65,000 bytes each 64 KiB apart. The port's reads fault the holes in,
// charged to this process (RssShmem rose by all 256 MiB); with a budget
// of 32 MiB the port now sends the front-end away well before, and turns
// away the next one, since the pages it faulted in stay in the file.
func TestMemoryBudgetHoles(t *testing.T) {
	p := newPort(t, vhostuser.Config{MemoryBudget: 32 << 20})
	drain(t, p)
	d := p.dial(t, vhostusertest.Config{MemSize: 4 << 30})
	before := rssShmem(t, 0)
	taken, err := d.SendAt(1<<30, holeStride, holeFrame, holeFrames)
	// Memory of this process's earlier tests may be unmapped meanwhile,
	// so RssShmem can fall: growth is what rose, or nothing.
	grew := max(rssShmem(t, 0), before) - before
	t.Logf("the port took %d of %d frames from holes (%v); RssShmem grew by %d MiB", taken, holeFrames, err, grew>>20)
	if !errors.Is(err, vhostusertest.ErrSentAway) {
		t.Fatalf("the port took %d frames from holes, RssShmem grew by %d MiB: not sent away (%v)", taken, grew>>20, err)
	}
	p.wait(t, vhostuser.EventDisconnected)
	if s := p.Stats(); s.MemoryOverBudget != 1 {
		t.Errorf("MemoryOverBudget %d, want 1", s.MemoryOverBudget)
	}
	if grew >= 128<<20 {
		t.Errorf("RssShmem grew by %d MiB, want under 128 with a budget of 32", grew>>20)
	}
	// A new front-end (the same, reconnecting) is turned away.
	d2, err := vhostusertest.Dial(p.Path(), vhostusertest.Config{})
	if err == nil {
		d2.Close()
		t.Fatal("a new front-end was served although the last one left more than the budget behind")
	}
	if s := p.Stats(); s.TurnedAway != 1 || s.MemoryOverBudget != 2 {
		t.Errorf("TurnedAway %d, MemoryOverBudget %d; want 1 and 2", s.TurnedAway, s.MemoryOverBudget)
	}
}

// TestMemoryBudgetTouched: the same frames from memory the guest wrote
// (a real guest's buffers) are all taken, however much more than the
// budget the port maps: the front-end maps those pages too, so the port
// does not hold them alone.
func TestMemoryBudgetTouched(t *testing.T) {
	p := newPort(t, vhostuser.Config{MemoryBudget: 32 << 20})
	drain(t, p)
	d := p.dial(t, vhostusertest.Config{MemSize: 1<<30 + holeFrames*holeStride})
	mem := d.Mem()
	for off := 1 << 30; off < len(mem); off += 4096 {
		mem[off] = 1
	}
	taken, err := d.SendAt(1<<30, holeStride, holeFrame, holeFrames)
	if err != nil || taken != holeFrames {
		t.Fatalf("the port took %d of %d frames the guest wrote: %v", taken, holeFrames, err)
	}
	time.Sleep(300 * time.Millisecond) // a few samples
	if s := p.Stats(); s.MemoryOverBudget != 0 || s.Disconnects != 0 {
		t.Errorf("MemoryOverBudget %d, Disconnects %d; want 0", s.MemoryOverBudget, s.Disconnects)
	}
}
