package napi

import (
	"encoding/json"
	"os"
	"testing"
)

// TestInstance: what napi list shows of an instance, from what napi-get
// and /proc say, and its JSON.
func TestInstance(t *testing.T) {
	r := instance(NAPI{ID: 8193, Ifindex: 7, IRQ: -1, Threaded: ThreadedEnabled, PID: os.Getpid(), DeferHardIRQs: 2}, "", nil, true)
	if r.Dev != "if7" || r.Queues == nil || len(r.Queues) != 0 || r.IRQ != nil || r.Threaded != "enabled" ||
		r.Kthread == nil || r.Kthread.PID != os.Getpid() || r.Kthread.Name == "" || r.Kthread.CPUs == "" {
		t.Errorf("instance: %+v, kthread %+v", r, r.Kthread)
	}
	r = instance(NAPI{ID: 1, Ifindex: 2, IRQ: 30, Threaded: ThreadedEnabled}, "eth0", []string{"rx0"}, false)
	b, err := json.Marshal(r)
	want := `{"id":1,"dev":"eth0","ifindex":2,"irq":30,"queues":["rx0"],"defer_hard_irqs":0,"gro_flush_timeout_ns":0,"irq_suspend_timeout_ns":0}`
	if err != nil || string(b) != want {
		t.Errorf("JSON without threaded support or kthread:\n got %s\nwant %s", b, want)
	}
	if s := (Kthread{Policy: "fifo", Priority: 50}).Sched(); s != "fifo 50" {
		t.Errorf("Sched: %q", s)
	}
	if s := (Kthread{Policy: "other"}).Sched(); s != "other" {
		t.Errorf("Sched: %q", s)
	}
	// A kthread that is gone by the time /proc is read shows its pid.
	if r := instance(NAPI{ID: 1, PID: 1 << 30}, "x", nil, true); r.Kthread == nil || *r.Kthread != (Kthread{PID: 1 << 30}) {
		t.Errorf("a gone kthread: %+v", r.Kthread)
	}
}
