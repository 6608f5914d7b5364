package tap

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit/kernel"
)

// TestQueueNAPI opens a real TAP whose queue 0 lacks IFF_NAPI and whose
// queue 1 has it, threaded: only queue 1 gets a NAPI kthread, and only
// frames written to queue 1 run it (its time on CPU grows), where the same
// TAP with IFF_NAPI on both queues has two kthreads.
func TestQueueNAPI(t *testing.T) {
	bed := testbed.NewForTest(t, testbed.Config{Mode: testbed.Forwarder})
	for _, tc := range []struct {
		napi     []bool
		kthreads int
	}{
		{[]bool{false, true}, 1},
		{[]bool{true, true}, 2},
	} {
		d, err := openIn(t, bed, bed.FwdNS, Config{Name: bed.LabIf, Queues: 2, QueueNAPI: tc.napi, VnetHdr: Off, Netns: bed.LabNS,
			NAPISettings: NAPISettings{Threaded: true}})
		if err != nil {
			t.Fatal(err)
		}
		f := d.Features()
		if !f.NAPI || f.Flags&unix.IFF_NAPI != 0 || len(f.QueueNAPI) != 2 {
			t.Errorf("QueueNAPI %v: features %+v", tc.napi, f)
		}
		pids := napiKthreads(t, d.Name())
		if len(pids) != tc.kthreads {
			t.Fatalf("QueueNAPI %v: %d NAPI kthreads %v, want %d", tc.napi, len(pids), pids, tc.kthreads)
		}
		if tc.kthreads == 1 {
			checkKthreadRuns(t, d, pids[0])
		}
		d.Close()
	}
}

// checkKthreadRuns writes frames to each queue of d and checks that only
// the writes to queue 1 put the NAPI kthread pid on a CPU.
func checkKthreadRuns(t *testing.T, d *Device, pid int) {
	t.Helper()
	// A broadcast frame of an EtherType no one takes: the stack counts it
	// and drops it, after the queue's NAPI (or not) handed it over.
	frame := make([]byte, 200)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5})
	for q, runs := range []bool{false, true} {
		before, _ := kernel.SchedStat(pid)
		for range 5000 {
			if _, err := unix.Write(d.Fds()[q], frame); err != nil {
				t.Fatalf("write to queue %d: %v", q, err)
			}
		}
		after, _ := kernel.SchedStat(pid)
		t.Logf("queue %d: NAPI kthread %d on CPU for %v during 5000 writes", q, pid, after-before)
		if (after > before) != runs {
			t.Errorf("queue %d: the NAPI kthread's time on CPU went from %v to %v; want it to grow: %v", q, before, after, runs)
		}
	}
}

// napiKthreads are the pids of the NAPI kthreads named after the TAP
// (net/core/dev.c: napi_kthread_create names them napi/DEV-ID, cut to 15
// bytes).
func napiKthreads(t *testing.T, name string) []int {
	t.Helper()
	prefix := "napi/" + name + "-"
	prefix = prefix[:min(len(prefix), 15)]
	comms, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range comms {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(string(b), prefix) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCheckQueueNAPI: what Open refuses of a per-queue IFF_NAPI before a
// TAP exists.
func TestCheckQueueNAPI(t *testing.T) {
	threaded := NAPISettings{Threaded: true}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Queues: 2, QueueNAPI: []bool{true}}, "for 1 queues of 2"},
		{Config{Queues: 2, QueueNAPI: []bool{false, true}, Persist: true}, "persistent"},
		{Config{Queues: 2, QueueNAPI: []bool{false, false}, NAPISettings: threaded}, "no queue has"},
		{Config{Queues: 2, QueueNAPI: []bool{false, true}, NAPI: Off, NAPISettings: threaded}, ""},
	} {
		err := checkConfig(tc.c)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkConfig(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
}
