package daemon

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// testFeatureJournals are feature journals in a directory of the test's
// own; lo (ifindex 1 in every namespace) is the NIC they name, and no
// test here touches it: restores go to a fake.
func testFeatureJournals(t *testing.T) *featureJournals {
	t.Helper()
	return journalsIn(t, "features", newFeatureJournals)
}

// killedFeatures writes was as the journal of nic, ifindex, as a tapfwd
// that is gone left it: its pid is this process's, its start another.
func killedFeatures(t *testing.T, js *featureJournals, nic string, ifindex int, was NICFeatures) string {
	t.Helper()
	d := js.journalDir
	d.start++
	if err := (&featureJournals{d}).save(nic, ifindex, was); err != nil {
		t.Fatal(err)
	}
	return js.path(ifindex, nic)
}

// fakeFeatures records what it was asked to restore, and answers err.
type fakeFeatures struct {
	got []string
	err error
}

func (f *fakeFeatures) restore(nic string, was NICFeatures) error {
	f.got = append(f.got, nic+": "+was.String())
	return f.err
}

// TestFeatureJournalRoundTrip: what the journal saves reads back the same,
// under the name of the NIC and its ifindex, in a file only root may
// write; nothing left to put back removes it.
func TestFeatureJournalRoundTrip(t *testing.T) {
	js := testFeatureJournals(t)
	was := NICFeatures{GRO: new(false)}
	if err := js.save("lo", 1, was); err != nil {
		t.Fatal(err)
	}
	p := js.path(1, "lo")
	got, err := js.read(p, 1, "lo")
	if err != nil || !reflect.DeepEqual(got.Was, was) || got.Ifindex != 1 || got.PID != os.Getpid() || got.NIC != "lo" {
		t.Fatalf("read back %+v, %v; want %+v of ifindex 1 by pid %d", got, err, was, os.Getpid())
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), `"was":{"gro":false}`) {
		t.Errorf("the journal: %s", b)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the journal: %v, %v; want mode 0600", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(js.dir); len(ents) != 1 {
		t.Errorf("the directory holds %d files, want the journal alone (no temporary left)", len(ents))
	}
	if err := js.save("lo", 1, NICFeatures{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal with nothing to put back is still there: %v", err)
	}
}

// TestFeatureJournalRecover: a journal whose writer is gone is restored
// once and removed; one whose writer runs is refused for its NIC and left
// by a sweep; one whose NIC is gone or was made again is discarded with
// the reason, without a restore; one that is not what tapfwd writes, or
// that a restore failed on, stays, with an error naming it.
func TestFeatureJournalRecover(t *testing.T) {
	js := testFeatureJournals(t)
	p := killedFeatures(t, js, "lo", 1, NICFeatures{GRO: new(false)})
	f := &fakeFeatures{}
	got, err := js.recover("lo", f.restore)
	if err != nil || len(got) != 1 || got[0].Discarded != "" || len(f.got) != 1 || f.got[0] != "lo: gro off" {
		t.Fatalf("recover: %+v, %v (restored %q)", got, err, f.got)
	}
	if s := got[0].String(); s != fmt.Sprintf("NIC lo: put back the features tapfwd pid %d changed and left when it was killed: gro off", os.Getpid()) {
		t.Errorf("the line: %q", s)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restored journal still there: %v", err)
	}

	// The writer runs: this process, as itself.
	if err := js.save("lo", 1, NICFeatures{GRO: new(true)}); err != nil {
		t.Fatal(err)
	}
	checkWriterRuns(t, func(nic string) ([]FeatureRecovery, error) { return js.recover(nic, f.restore) }, ErrFeatureJournal, func() int { return len(f.got) })
	os.Remove(p)

	for _, tc := range []struct {
		nic     string
		ifindex int
		want    string
	}{
		{"lo", 999, "the NIC was made again (ifindex 1, was 999)"},
		{"tfwgone0", 5, "the NIC is gone"},
	} {
		p := killedFeatures(t, js, tc.nic, tc.ifindex, NICFeatures{GRO: new(true)})
		got, err := js.recover("", f.restore)
		if err != nil || len(got) != 1 || !strings.Contains(got[0].Discarded, tc.want) || got[0].Restored.GRO != nil || len(f.got) != 1 {
			t.Errorf("%s ifindex %d: %+v, %v; want discarded: %s", tc.nic, tc.ifindex, got, err, tc.want)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the discarded journal is still there", tc.nic)
		}
	}

	p = killedFeatures(t, js, "lo", 1, NICFeatures{GRO: new(false)})
	good, _ := os.ReadFile(p)
	for name, body := range map[string]string{
		"nothing to put back": strings.Replace(string(good), `{"gro":false}`, `{}`, 1),
		"unknown feature":     strings.Replace(string(good), `{"gro":false}`, `{"gro":false,"lro":true}`, 1),
		"another ifindex":     strings.Replace(string(good), `"ifindex":1`, `"ifindex":2`, 1),
		"restore fails":       string(good),
	} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		f := &fakeFeatures{}
		want := p + " is not trusted"
		if name == "restore fails" {
			f.err, want = errors.New("no such device"), p+": no such device"
		}
		_, err := js.recover("lo", f.restore)
		if !errors.Is(err, ErrFeatureJournal) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, want)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: the journal went: %v", name, err)
		}
	}
}
