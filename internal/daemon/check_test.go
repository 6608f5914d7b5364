package daemon

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/base/cpulist"
	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
)

// TestSharedPollerCPU: check warns in one line when a queue worker is
// pinned to --busy-poll-cpu's CPU (naming the CPU and the queues), and
// says nothing when the workers are elsewhere or float, or without
// PollKernel's own-CPU poller.
func TestSharedPollerCPU(t *testing.T) {
	allowed, err := cpulist.Allowed()
	if err != nil || len(allowed) == 0 {
		t.Fatalf("allowed CPUs: %v %v", allowed, err)
	}
	a := allowed[0]
	other := a + 1                       // compared with, never pinned to: need not be a CPU here
	byDefault, err := workerCPUs(nil, 1) // the first CPU this process may use
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		poll    Poll
		cpus    []int // the queue workers' CPUs, as lookup resolved them
		warning string
	}{
		{"shared", PollKernel, []int{a}, `busy_poll_cpu=` + strconv.Itoa(a) + ` queues=[0]`},
		{"shared by default", PollKernel, byDefault, `busy_poll_cpu=` + strconv.Itoa(a) + ` queues=[0]`},
		{"shared by the second queue", PollKernel, []int{other, a}, `busy_poll_cpu=` + strconv.Itoa(a) + ` queues=[1]`},
		{"shared by both queues", PollKernel, []int{a, a}, `busy_poll_cpu=` + strconv.Itoa(a) + ` queues="[0 1]"`},
		{"elsewhere", PollKernel, []int{other}, ""},
		{"unpinned", PollKernel, []int{-1, -1}, ""},
		{"no own-CPU poller", PollBlock, []int{a}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncbuf.Buffer
			d := &Daemon{log: slog.New(slog.NewTextHandler(&log, nil)), m: machine{nic: &net.Interface{Index: 1, Name: "lo"}, cpus: tc.cpus}}
			d.c.NIC.Name = "lo"
			d.c.Workers.Poll = tc.poll
			d.c.Workers.KernelPoll = KernelPoll{OwnCPU: tc.poll == PollKernel, CPU: a}
			if err := d.check(); err != nil {
				t.Fatal(err)
			}
			var warned []string
			for l := range strings.Lines(log.String()) {
				if strings.Contains(l, "busy poller's CPU") {
					warned = append(warned, l)
				}
			}
			switch {
			case tc.warning == "" && len(warned) > 0:
				t.Errorf("warned: %q", warned)
			case tc.warning != "" && (len(warned) != 1 || !strings.Contains(warned[0], "level=WARN") || !strings.Contains(warned[0], tc.warning) || !strings.Contains(warned[0], "--cpus")):
				t.Errorf("warnings %q, want one with %q and the advice to give the workers other CPUs (--cpus)\n%s", warned, tc.warning, log.String())
			}
		})
	}
}
