package napi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/napi"
)

func needThreaded(t *testing.T, c *napi.Client) {
	t.Helper()
	if !c.Features().Threaded {
		_, err := c.Set(1, napi.Attrs{Threaded: new(napi.ThreadedEnabled)})
		t.Skipf("skipping: %v", err)
	}
}

// procStatus returns field name of /proc/PID/status.
func procStatus(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return ""
}

// lastCPU is the highest CPU this process may run on.
func lastCPU(t *testing.T) int {
	allowed, err := cpulist.Allowed()
	if err != nil {
		t.Fatal(err)
	}
	return allowed[len(allowed)-1]
}

// waitGone waits until pid is no longer the NAPI kthread name.
func waitGone(t *testing.T, pid int, name string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		k, err := napi.ReadKthread(pid)
		if err != nil || k.Name != name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kthread %s (pid %d) still running", name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKernelListAndQueues(t *testing.T) {
	bed, c, ifindex, id := napi.VethNAPI(t)
	list, err := c.List(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if n.Ifindex != ifindex || n.ID == 0 || n.PID != 0 || n.Threaded != napi.ThreadedDisabled || n.IRQ != -1 {
			t.Errorf("fresh veth NAPI: %+v", n)
		}
	}
	all, err := c.List(0)
	if err != nil {
		t.Fatal(err)
	}
	// The client sees the fwd namespace only: w1's NAPIs and nothing else
	// (lo has none).
	if len(all) != len(list) {
		t.Errorf("List(0) in %s = %+v, want w1's %+v", bed.FwdNS, all, list)
	}
	got, err := c.Get(id)
	if err != nil || got != list[0] {
		t.Errorf("Get(%d) = %+v, %v; want %+v", id, got, err, list[0])
	}
	if _, err := c.Get(0xfffffff0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Get of a missing id: %v, want os.ErrNotExist", err)
	}

	qs, err := c.Queues(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	var rx, tx bool
	for _, q := range qs {
		rx = rx || q.Type == napi.QueueRX && q.ID == 0 && q.Ifindex == ifindex
		tx = tx || q.Type == napi.QueueTX && q.ID == 0 && q.Ifindex == ifindex
	}
	if !rx || !tx {
		t.Errorf("Queues(%d) = %+v, want rx and tx queue 0", ifindex, qs)
	}
	// veth queues name no NAPI on 6.18; accept a kernel that adds one.
	qid, err := c.QueueNAPI(ifindex, 0, napi.QueueRX)
	if err != nil && !errors.Is(err, napi.ErrNoNAPI) || err == nil && qid != id {
		t.Errorf("QueueNAPI(rx 0) = %d, %v", qid, err)
	}
	if _, err := c.QueueNAPI(ifindex, 99, napi.QueueRX); err == nil {
		t.Error("QueueNAPI of a queue that does not exist succeeded")
	}
}

func TestKernelThreadedPinRestore(t *testing.T) {
	bed, c, _, id := napi.VethNAPI(t)
	needThreaded(t, c)
	ch := napi.NewChanges(c)
	t.Cleanup(func() {
		if err := ch.Restore(); err != nil {
			t.Error(err)
		}
	})

	err := ch.Set(id, napi.Attrs{
		Threaded:          new(napi.ThreadedEnabled),
		DeferHardIRQs:     new(uint32(2)),
		GROFlushTimeout:   new(200 * time.Microsecond),
		IRQSuspendTimeout: new(5 * time.Second), // 8 bytes on the wire
	})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if n.Threaded != napi.ThreadedEnabled || n.PID == 0 || n.DeferHardIRQs != 2 ||
		n.GROFlushTimeout != 200*time.Microsecond || n.IRQSuspendTimeout != 5*time.Second {
		t.Fatalf("after Set: %+v", n)
	}
	// drivers/net/veth.c and net/core/dev.c: napi_kthread_create names it
	// napi/<dev>-<id>.
	want := fmt.Sprintf("napi/%s-%d", bed.NIC, id)
	if len(want) > 15 {
		want = want[:15] // TASK_COMM_LEN - 1
	}
	if k, err := napi.ReadKthread(n.PID); err != nil || k.Name != want || k.Policy != "other" {
		t.Fatalf("pid %d is %+v, %v; want %q under SCHED_OTHER", n.PID, k, err, want)
	}
	if pids, err := napi.Kthreads(bed.NIC); err != nil || !slices.Contains(pids, n.PID) {
		t.Errorf("Kthreads(%s) = %v, %v; want pid %d among them", bed.NIC, pids, err, n.PID)
	}
	before := procStatus(t, n.PID, "Cpus_allowed_list")
	cpu := lastCPU(t)
	if err := ch.PinKthread(n.PID, cpu); err != nil {
		t.Fatal(err)
	}
	if got := procStatus(t, n.PID, "Cpus_allowed_list"); got != strconv.Itoa(cpu) {
		t.Errorf("Cpus_allowed_list after pinning to %d: %q", cpu, got)
	}
	if err := ch.SetFIFO(n.PID, 10); err != nil {
		t.Fatal(err)
	}
	if a, err := unix.SchedGetAttr(n.PID, 0); err != nil || a.Policy != unix.SCHED_FIFO || a.Priority != 10 {
		t.Errorf("after SetFIFO: %+v, %v", a, err)
	}
	if k, err := napi.ReadKthread(n.PID); err != nil || k.Policy != "fifo" || k.Priority != 10 || k.CPUs != strconv.Itoa(cpu) {
		t.Errorf("ReadKthread after pinning and SetFIFO: %+v, %v", k, err)
	}
	// Kthread changes restored while the kthread runs: back to the state
	// just made, CPU cpu and fifo 10.
	mid, err := napi.ReadKthread(n.PID)
	if err != nil {
		t.Fatal(err)
	}
	kch := napi.NewChanges(c)
	if err := kch.PinKthread(n.PID, 0); err != nil {
		t.Fatal(err)
	}
	if err := kch.SetFIFO(n.PID, 20); err != nil {
		t.Fatal(err)
	}
	if k, _ := napi.ReadKthread(n.PID); k.CPUs != "0" || k.Priority != 20 {
		t.Errorf("second pin and SetFIFO: %+v", k)
	}
	if err := kch.Restore(); err != nil {
		t.Fatal(err)
	}
	if k, err := napi.ReadKthread(n.PID); err != nil || k != mid {
		t.Errorf("kthread after Restore: %+v, %v; want %+v", k, err, mid)
	}

	busy := napi.Attrs{Threaded: new(napi.ThreadedBusyPoll)}
	if c.Features().BusyPoll {
		if err := ch.Set(id, busy); err != nil {
			t.Fatalf("busy-poll on a kernel that has it: %v", err)
		}
		if n, _ := c.Get(id); n.Threaded != napi.ThreadedBusyPoll {
			t.Errorf("after busy-poll: %+v", n)
		}
	} else {
		err := ch.Set(id, busy)
		var fe *napi.FeatureError
		if !errors.As(err, &fe) || fe.Since != "6.19" || !errors.Is(err, errors.ErrUnsupported) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("busy-poll: %v, want a one-line FeatureError naming 6.19", err)
		}
		if n, _ := c.Get(id); n.Threaded != napi.ThreadedEnabled {
			t.Errorf("refused busy-poll changed threaded: %+v", n)
		}
	}

	// Pin again: Restore must unwind both pins, newest first.
	if err := ch.PinKthread(n.PID, 0); err != nil {
		t.Fatal(err)
	}
	if err := ch.Restore(); err != nil {
		t.Fatal(err)
	}
	if ch.Len() != 0 {
		t.Errorf("%d changes left after Restore", ch.Len())
	}
	got, err := c.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if want := (napi.NAPI{ID: id, Ifindex: got.Ifindex, IRQ: -1}); got != want {
		t.Errorf("after Restore: %+v, want %+v", got, want)
	}
	// Disabling threaded stops the kthread (6.18); if a kernel keeps it,
	// its affinity must be back.
	if k, err := napi.ReadKthread(n.PID); err == nil && k.Name == want {
		if got := procStatus(t, n.PID, "Cpus_allowed_list"); got != before {
			t.Errorf("Cpus_allowed_list after Restore: %q, want %q", got, before)
		}
	}
	waitGone(t, n.PID, want)
}

// A NAPI that disappears (GRO off deletes veth NAPIs) takes its kthread and
// settings with it: Restore has nothing left to do and must not fail.
func TestKernelRestoreAfterNAPIGone(t *testing.T) {
	bed, c, ifindex, id := napi.VethNAPI(t)
	needThreaded(t, c)
	ch := napi.NewChanges(c)
	if err := ch.Set(id, napi.Attrs{Threaded: new(napi.ThreadedEnabled)}); err != nil {
		t.Fatal(err)
	}
	n, err := c.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PinKthread(n.PID, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bed.Run(ctx, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "off"); err != nil {
		t.Fatal(err)
	}
	if list, err := c.List(ifindex); err != nil || len(list) != 0 {
		t.Fatalf("NAPIs after GRO off: %+v, %v", list, err)
	}
	waitGone(t, n.PID, fmt.Sprintf("napi/%s-%d", bed.NIC, id))
	if err := ch.Restore(); err != nil {
		t.Errorf("Restore after the NAPI went: %v", err)
	}
}

// TestKernelJournal: a Changes with a Journal saves each step before its
// change (the NAPI still has its old settings when save runs, and a save
// that fails refuses the change); the last Record saved, restored by
// another Client as if the process had been killed, puts the NAPI back and
// its kthread goes; a clean Restore leaves a Record with no steps; a
// Record whose NAPI is gone is refused as stale, changing nothing.
func TestKernelJournal(t *testing.T) {
	bed, c, ifindex, id := napi.VethNAPI(t)
	needThreaded(t, c)
	fresh, err := c.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	save := func(r napi.Record) (err error) {
		last, err = json.Marshal(r)
		return err
	}
	j := napi.NewJournal(ifindex, func(r napi.Record) error {
		if n, err := c.Get(id); len(r.Steps) == 1 && (err != nil || n != fresh) {
			t.Errorf("saving %+v: NAPI %d already %+v, %v", r, id, n, err)
		}
		return save(r)
	})
	ch := napi.NewChanges(c).UseJournal(j)
	if err := ch.Set(id, napi.Attrs{Threaded: new(napi.ThreadedEnabled), DeferHardIRQs: new(uint32(2)), GROFlushTimeout: new(200 * time.Microsecond)}); err != nil {
		t.Fatal(err)
	}
	n, err := c.Get(id)
	if err != nil || n.PID == 0 {
		t.Fatalf("after Set: %+v, %v", n, err)
	}
	kthread := fmt.Sprintf("napi/%s-%d", bed.NIC, id)
	if err := ch.PinKthread(n.PID, lastCPU(t)); err != nil {
		t.Fatal(err)
	}
	var rec napi.Record
	if err := json.Unmarshal(last, &rec); err != nil || len(rec.Steps) != 2 || rec.Ifindex != ifindex {
		t.Fatalf("the last Record saved: %s, %v; want 2 steps of ifindex %d", last, err, ifindex)
	}
	// Killed: ch never restores. Another client restores the Record.
	c2 := napi.NewVethClient(t, bed)
	done, err := rec.Restore(c2)
	if err != nil || len(done) != 2 {
		t.Fatalf("Restore of %s: %v, %v; want both steps taken", last, done, err)
	}
	if got, err := c.Get(id); err != nil || got != fresh {
		t.Errorf("after the Record's Restore: %+v, %v; want %+v", got, err, fresh)
	}
	waitGone(t, n.PID, kthread[:min(len(kthread), 15)])

	// A save that fails refuses the change.
	failing := napi.NewChanges(c).UseJournal(napi.NewJournal(ifindex, func(napi.Record) error { return os.ErrPermission }))
	if err := failing.Set(id, napi.Attrs{DeferHardIRQs: new(uint32(3))}); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Set with a failing journal: %v, want its error", err)
	}
	if got, _ := c.Get(id); got.DeferHardIRQs != fresh.DeferHardIRQs {
		t.Errorf("the refused change was made: %+v", got)
	}

	// A clean Restore empties the journal.
	j = napi.NewJournal(ifindex, save)
	ch = napi.NewChanges(c).UseJournal(j)
	if err := ch.Set(id, napi.Attrs{DeferHardIRQs: new(uint32(4))}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Restore(); err != nil {
		t.Fatal(err)
	}
	if r := j.Record(); len(r.Steps) != 0 || !strings.Contains(string(last), `"steps":[]`) {
		t.Errorf("after a clean Restore the journal holds %+v, last saved %s", r, last)
	}

	// GRO off deletes the NAPI: the Record is stale and changes nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := bed.Run(ctx, bed.FwdNS, "ethtool", "-K", bed.NIC, "gro", "off"); err != nil {
		t.Fatal(err)
	}
	if done, err := rec.Restore(c2); !errors.Is(err, napi.ErrStale) || len(done) != 0 {
		t.Errorf("Restore of a Record whose NAPI is gone: %v, %v; want ErrStale", done, err)
	}
}
