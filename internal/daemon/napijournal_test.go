package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/napi"
)

// testJournals are journals in a directory of the test's own; lo (ifindex
// 1 in every namespace) is the NIC they name, and no test here touches
// it: restores go to a fake.
func testJournals(t *testing.T) *napiJournals {
	t.Helper()
	return journalsIn(t, "napi", newNAPIJournals)
}

// journalsIn opens journals of a kind with open in a directory name of
// the test's own; without root it skips t.
func journalsIn[J any](t *testing.T, name string, open func(dir string) (J, error)) J {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the journal directory must be root's")
	}
	js, err := open(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// record is a Record of one NAPI step on ifindex.
func record(ifindex int) napi.Record {
	return napi.Record{Ifindex: ifindex, Steps: []napi.Step{{NAPI: &napi.NAPIStep{ID: 8193,
		Was: napi.SavedAttr{DeferHardIRQs: new(uint32(0)), GROFlushTimeoutNS: new(int64(0))}}}}}
}

// killed writes r as the journal of nic, as a tapfwd that is gone left it:
// its pid is this process's, its start another (the pid used again).
func killed(t *testing.T, js *napiJournals, nic string, r napi.Record) string {
	t.Helper()
	d := js.journalDir
	d.start++
	dead := &napiJournals{journalDir: d}
	if err := dead.save(nic, r); err != nil {
		t.Fatal(err)
	}
	return js.path(r.Ifindex, nic)
}

// fakeRestore records what it was asked to restore, and answers err.
type fakeRestore struct {
	got []napi.Record
	err error
}

func (f *fakeRestore) restore(r napi.Record) ([]napi.Step, error) {
	f.got = append(f.got, r)
	if f.err != nil {
		return nil, f.err
	}
	return r.Steps, nil
}

// TestNAPIJournalRoundTrip: what the journal saves reads back the same,
// under the name of the NIC and its ifindex, in a file only root may
// write; a Record with no steps left removes it.
func TestNAPIJournalRoundTrip(t *testing.T) {
	js := testJournals(t)
	j := js.journal(1, "lo")
	if js.journal(1, "lo") != j || js.journal(2, "lo") == j {
		t.Error("journal: one per ifindex, shared by its Changes")
	}
	r := record(1)
	if err := js.save("lo", r); err != nil {
		t.Fatal(err)
	}
	p := js.path(1, "lo")
	got, err := js.read(p, 1, "lo")
	if err != nil || !reflect.DeepEqual(got.Record, r) || got.PID != os.Getpid() || got.NIC != "lo" {
		t.Fatalf("read back %+v, %v; want %+v by pid %d", got, err, r, os.Getpid())
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the journal: %v, %v; want mode 0600", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(js.dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want the journal alone (no temporary left)", len(ents))
	}
	if err := js.save("lo", napi.Record{Ifindex: 1, Steps: []napi.Step{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal with no steps left is still there: %v", err)
	}
}

// checkWriterRuns checks recover on NIC lo's journal, which this process
// has just saved and so writes: refused with want for lo, and left by a
// sweep with nothing restored (restored counts the restores so far).
func checkWriterRuns[R any](t *testing.T, recover func(nic string) ([]R, error), want error, restored func() int) {
	t.Helper()
	n := restored()
	if _, err := recover("lo"); !errors.Is(err, want) || !strings.Contains(err.Error(), fmt.Sprintf("tapfwd pid %d is changing", os.Getpid())) {
		t.Errorf("a running writer's journal: %v, want refused", err)
	}
	if got, err := recover(""); err != nil || len(got) != 0 || restored() != n {
		t.Errorf("a sweep took a running writer's journal: %+v, %v", got, err)
	}
}

// TestNAPIJournalRecover: a journal whose writer is gone is restored once
// and removed; one whose writer runs is refused for its NIC and left by a
// sweep; one whose NIC is gone, was made again or lost its NAPI
// instances is discarded, with the reason, without a restore.
func TestNAPIJournalRecover(t *testing.T) {
	js := testJournals(t)
	p := killed(t, js, "lo", record(1))
	f := &fakeRestore{}
	got, err := js.recover("lo", f.restore)
	if err != nil || len(got) != 1 || got[0].Discarded != "" || len(got[0].Restored) != 1 || len(f.got) != 1 {
		t.Fatalf("recover: %+v, %v (restored %+v)", got, err, f.got)
	}
	if s := got[0].String(); !strings.Contains(s, "NIC lo: put back") || !strings.Contains(s, "defer-hard-irqs 0") {
		t.Errorf("the line: %q", s)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restored journal still there: %v", err)
	}

	// The writer runs: this process, as itself.
	if err := js.save("lo", record(1)); err != nil {
		t.Fatal(err)
	}
	checkWriterRuns(t, func(nic string) ([]NAPIRecovery, error) { return js.recover(nic, f.restore) }, ErrNAPIJournal, func() int { return len(f.got) })
	os.Remove(p)

	for _, tc := range []struct {
		nic     string
		ifindex int
		err     error
		want    string
	}{
		{"lo", 999, nil, "the NIC was made again (ifindex 1, was 999)"},
		{"tfwgone0", 5, nil, "the NIC is gone"},
		{"lo", 1, fmt.Errorf("napi: NAPI 8193: %w", napi.ErrStale), "the NAPI instances it names are gone"},
	} {
		p := killed(t, js, tc.nic, record(tc.ifindex))
		f := &fakeRestore{err: tc.err}
		got, err := js.recover("", f.restore)
		if err != nil || len(got) != 1 || !strings.Contains(got[0].Discarded, tc.want) || len(got[0].Restored) != 0 {
			t.Errorf("%s ifindex %d: %+v, %v; want discarded: %s", tc.nic, tc.ifindex, got, err, tc.want)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the discarded journal is still there", tc.nic)
		}
	}
}

// TestNAPIJournalCorrupt: a journal that is not what tapfwd writes is
// refused with an error naming it, never restored, and left in place.
func TestNAPIJournalCorrupt(t *testing.T) {
	js := testJournals(t)
	killed(t, js, "lo", record(1))
	p := js.path(1, "lo")
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for name, spoil := range map[string]func() error{
		"not JSON":      func() error { return os.WriteFile(p, []byte("{\"version\":1,"), 0o600) },
		"unknown field": func() error { return os.WriteFile(p, []byte(strings.Replace(string(good), "{", `{"x":1,`, 1)), 0o600) },
		"trailing data": func() error { return os.WriteFile(p, append(good, "{}"...), 0o600) },
		"version 2": func() error {
			return os.WriteFile(p, []byte(strings.Replace(string(good), `"version":1`, `"version":2`, 1)), 0o600)
		},
		"another NIC": func() error {
			return os.WriteFile(p, []byte(strings.Replace(string(good), `"nic":"lo"`, `"nic":"eth0"`, 1)), 0o600)
		},
		"bad step": func() error {
			return os.WriteFile(p, []byte(strings.Replace(string(good), `"id":8193`, `"id":0`, 1)), 0o600)
		},
		"group-writable": func() error { os.WriteFile(p, good, 0o600); return os.Chmod(p, 0o620) },
		"a link":         func() error { os.Remove(p); return os.Symlink("/etc/hostname", p) },
		"too large":      func() error { return os.WriteFile(p, []byte(strings.Repeat(" ", maxJournal+1)), 0o600) },
	} {
		os.Remove(p)
		if err := spoil(); err != nil {
			t.Fatal(err)
		}
		f := &fakeRestore{}
		_, err := js.recover("lo", f.restore)
		if !errors.Is(err, ErrNAPIJournal) || !strings.Contains(err.Error(), p+" is not trusted") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line naming %s as not trusted", name, err, p)
		}
		if len(f.got) != 0 {
			t.Errorf("%s: restored %+v", name, f.got)
		}
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: the journal went: %v", name, err)
		}
	}
}
