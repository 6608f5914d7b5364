package daemon

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tapfwd/tapfwd/napi"
)

// NAPIJournalDir holds a journal per NIC of the NAPI settings a running
// tapfwd changed on it (napi.Journal): written before each change, so
// that it holds the settings as they were before tapfwd touched them, and
// removed once Close has put them back. When tapfwd is killed the NIC
// keeps tapfwd's settings; the next run on that NIC puts back what the
// journal holds before it reads the NIC's settings, and so does Down.
// Each file is NETNS-IFINDEX-NIC.json, NETNS the inode of the NIC's
// network namespace (journalDir).
const NAPIJournalDir = "/run/tapfwd/napi"

// ErrNAPIJournal means a NAPI journal was not restored: it is corrupt or
// not root's (and is not trusted), or the tapfwd that writes it runs.
var ErrNAPIJournal = errors.New("NAPI journal")

// napiJournalVersion is the format of the files.
const napiJournalVersion = 1

// napiJournalFile is a journal's contents: who writes it, and the steps
// that undo what it changed.
type napiJournalFile struct {
	journalHead
	Record napi.Record `json:"record"`
}

// napiJournals are the NAPI journals in dir of the calling thread's
// network namespace, and the one this process writes.
type napiJournals struct {
	journalDir

	mu  sync.Mutex
	cur *napi.Journal // the journal of the NIC's ifindex now
}

func newNAPIJournals(dir string) (*napiJournals, error) {
	d, err := newJournalDir(dir)
	if err != nil {
		return nil, err
	}
	return &napiJournals{journalDir: d}, nil
}

// journal is the journal of NIC nic, ifindex, for the changes this
// process makes; the Changes on one ifindex share one.
func (js *napiJournals) journal(ifindex int, nic string) *napi.Journal {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.cur == nil || js.cur.Record().Ifindex != ifindex {
		js.cur = napi.NewJournal(ifindex, func(r napi.Record) error { return js.save(nic, r) })
	}
	return js.cur
}

// save writes r, or removes the file when r has no steps left.
func (js *napiJournals) save(nic string, r napi.Record) error {
	p := js.path(r.Ifindex, nic)
	if len(r.Steps) == 0 {
		return js.remove(p)
	}
	return js.write(p, napiJournalFile{journalHead: js.head(nic, napiJournalVersion), Record: r})
}

// read reads the journal at path, named for NIC nic, ifindex, and checks
// it: a root-owned regular file only root may write, of this format, that
// says what its name says, with a Record napi.Record.Check takes.
func (js *napiJournals) read(path string, ifindex int, nic string) (napiJournalFile, error) {
	var j napiJournalFile
	if err := js.journalDir.read(path, &j); err != nil {
		return j, err
	}
	if err := j.check(js.journalDir, napiJournalVersion, nic, ifindex, j.Record.Ifindex); err != nil {
		return j, err
	}
	return j, j.Record.Check()
}

// NAPIRecovery is what became of a NAPI journal a tapfwd that no longer
// runs left: restored, or discarded with the reason.
type NAPIRecovery struct {
	JournalRecovery
	Restored []napi.Step // what was put back, newest change first
}

func (r NAPIRecovery) String() string { return r.text("NAPI journal", "NAPI settings", r.steps()) }

// steps says what was put back.
func (r NAPIRecovery) steps() string {
	var steps []string
	for _, s := range r.Restored {
		steps = append(steps, s.String())
	}
	return strings.Join(steps, "; ")
}

// recover restores, or discards, the journals of this namespace whose
// writer no longer runs: of NIC nic only (a journal of nic whose writer
// runs is then an error), or of every NIC when nic is "" (those whose
// writer runs are left). A journal whose NIC is gone, was made again
// (another ifindex) or lost the NAPI instances it names (napi.ErrStale)
// is discarded: its settings went with them. A journal that cannot be
// read or checked, or not restored, stays, and the error says so.
func (js *napiJournals) recover(nic string, restore func(napi.Record) ([]napi.Step, error)) ([]NAPIRecovery, error) {
	return recoverJournals(js.journalDir, nic, ErrNAPIJournal, "NAPI settings", js.read,
		func(j napiJournalFile, jr JournalRecovery) (NAPIRecovery, error) {
			r := NAPIRecovery{JournalRecovery: jr}
			if r.Discarded != "" {
				return r, nil
			}
			var err error
			r.Restored, err = restore(j.Record)
			if errors.Is(err, napi.ErrStale) {
				r.Restored, r.Discarded, err = nil, fmt.Sprintf("%v: their settings went with them", err), nil
			}
			return r, err
		})
}

// restoreNAPIRecord restores r on this namespace's devices.
func restoreNAPIRecord(r napi.Record) ([]napi.Step, error) {
	c, err := napi.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return r.Restore(c)
}

// nicJournal is the NAPI journal of the NIC ifindex; nil before
// recoverNIC.
func (d *Daemon) nicJournal(ifindex int) *napi.Journal {
	if d.napiJ == nil {
		return nil
	}
	return d.napiJ.journal(ifindex, d.c.NIC.Name)
}
