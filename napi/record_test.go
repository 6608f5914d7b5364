package napi_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/napi"
)

// sample is a Record with every kind of step.
func sample() napi.Record {
	was := napi.SavedAttr{Threaded: new(napi.ThreadedDisabled), DeferHardIRQs: new(uint32(0)),
		GROFlushTimeoutNS: new(int64(0)), IRQSuspendTimeout: new(int64(5 * time.Second))}
	return napi.Record{Ifindex: 7, Steps: []napi.Step{
		{NAPI: &napi.NAPIStep{ID: 8193, Was: was}},
		{Thread: &napi.ThreadStep{PID: 812, Start: 4711, CPUs: []int{0, 1, 3}}},
		{Thread: &napi.ThreadStep{PID: 812, Start: 4711, Sched: &napi.Sched{Policy: 0, Nice: -5, ResetOnFork: true}}},
	}}
}

// TestRecordRoundTrip: a Record comes back from its JSON as it was, and
// says in words what it puts back.
func TestRecordRoundTrip(t *testing.T) {
	r := sample()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got napi.Record
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip of %s gave %+v", b, got)
	}
	if err := got.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	if s := got.Steps[0].String(); s != "NAPI 8193: threaded disabled, defer-hard-irqs 0, gro-flush-timeout 0s, irq-suspend-timeout 5s" {
		t.Errorf("step 0 reads %q", s)
	}
	if a := got.Steps[0].NAPI.Was.Attrs(); *a.IRQSuspendTimeout != 5*time.Second || *a.GROFlushTimeout != 0 {
		t.Errorf("Attrs: %+v", a)
	}
}

// TestRecordCheckRefuses: what no Changes writes is refused, never
// restored.
func TestRecordCheckRefuses(t *testing.T) {
	for name, spoil := range map[string]func(*napi.Record){
		"no ifindex":        func(r *napi.Record) { r.Ifindex = 0 },
		"empty step":        func(r *napi.Record) { r.Steps[0].NAPI = nil },
		"both kinds":        func(r *napi.Record) { r.Steps[1].NAPI = r.Steps[0].NAPI },
		"NAPI id 0":         func(r *napi.Record) { r.Steps[0].NAPI.ID = 0 },
		"nothing to set":    func(r *napi.Record) { r.Steps[0].NAPI.Was = napi.SavedAttr{} },
		"threaded 9":        func(r *napi.Record) { r.Steps[0].NAPI.Was.Threaded = new(napi.Threaded(9)) },
		"defer over S32":    func(r *napi.Record) { r.Steps[0].NAPI.Was.DeferHardIRQs = new(uint32(1 << 31)) },
		"negative timeout":  func(r *napi.Record) { r.Steps[0].NAPI.Was.GROFlushTimeoutNS = new(int64(-1)) },
		"pid 0":             func(r *napi.Record) { r.Steps[1].Thread.PID = 0 },
		"no start":          func(r *napi.Record) { r.Steps[1].Thread.Start = 0 },
		"no CPU":            func(r *napi.Record) { r.Steps[1].Thread.CPUs = []int{} },
		"CPU 4096":          func(r *napi.Record) { r.Steps[1].Thread.CPUs = []int{4096} },
		"deadline":          func(r *napi.Record) { r.Steps[2].Thread.Sched.Policy = 6 },
		"priority 100":      func(r *napi.Record) { r.Steps[2].Thread.Sched.Priority = 100 },
		"cpus and sched":    func(r *napi.Record) { r.Steps[2].Thread.CPUs = []int{0} },
		"unknown policy 42": func(r *napi.Record) { r.Steps[2].Thread.Sched.Policy = 42 },
	} {
		r := sample()
		spoil(&r)
		err := r.Check()
		if !errors.Is(err, napi.ErrBadRecord) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Check = %v, want one line matching ErrBadRecord", name, err)
		}
		if _, err := r.Restore(nil); !errors.Is(err, napi.ErrBadRecord) {
			t.Errorf("%s: Restore = %v, want ErrBadRecord before anything is touched", name, err)
		}
	}
}
