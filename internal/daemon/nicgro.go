package daemon

import (
	"errors"
	"fmt"
	"net"

	"github.com/tapfwd/tapfwd/netns"
)

// FeatureJournalDir holds a journal per NIC of the features (ethtool -k)
// a running tapfwd changed on it (NIC.GRO): written before the change, so
// that it holds what the NIC had before, and removed once Close has put
// that back. When tapfwd is killed the NIC keeps tapfwd's features; the
// next run on that NIC puts back what the journal holds, after the NAPI
// journal's settings (GRO off takes a veth's NAPI instances), and so does
// Down. The files are named as NAPIJournalDir's (journalDir).
const FeatureJournalDir = "/run/tapfwd/features"

// ErrFeatureJournal means a NIC feature journal was not restored: it is
// corrupt or not root's (and is not trusted), or the tapfwd that writes it
// runs.
var ErrFeatureJournal = errors.New("NIC feature journal")

// featureJournalVersion is the format of the files.
const featureJournalVersion = 1

// NICFeatures are NIC features as a journal keeps them: nil ones were
// not changed.
type NICFeatures struct {
	GRO *bool `json:"gro,omitempty"`
}

func (f NICFeatures) empty() bool { return f.GRO == nil }

// String says what f sets: "gro off"; "nothing" when empty.
func (f NICFeatures) String() string {
	if f.GRO == nil {
		return "nothing"
	}
	if *f.GRO {
		return "gro on"
	}
	return "gro off"
}

// featureJournalFile is a journal's contents: who writes it, and the
// features the NIC had before.
type featureJournalFile struct {
	journalHead
	Ifindex int         `json:"ifindex"`
	Was     NICFeatures `json:"was"`
}

// featureJournals are the NIC feature journals in dir of the calling
// thread's network namespace.
type featureJournals struct{ journalDir }

func newFeatureJournals(dir string) (*featureJournals, error) {
	d, err := newJournalDir(dir)
	if err != nil {
		return nil, err
	}
	return &featureJournals{d}, nil
}

// save writes was as the journal of NIC nic, ifindex, or removes it when
// was is empty.
func (js *featureJournals) save(nic string, ifindex int, was NICFeatures) error {
	p := js.path(ifindex, nic)
	if was.empty() {
		return js.remove(p)
	}
	return js.write(p, featureJournalFile{journalHead: js.head(nic, featureJournalVersion), Ifindex: ifindex, Was: was})
}

// read reads the journal at path, named for NIC nic, ifindex, and checks
// it, as the NAPI journal's read does.
func (js *featureJournals) read(path string, ifindex int, nic string) (featureJournalFile, error) {
	var j featureJournalFile
	if err := js.journalDir.read(path, &j); err != nil {
		return j, err
	}
	if err := j.check(js.journalDir, featureJournalVersion, nic, ifindex, j.Ifindex); err != nil {
		return j, err
	}
	if j.Was.empty() {
		return j, errors.New("no feature to put back")
	}
	return j, nil
}

// FeatureRecovery is what became of a NIC feature journal a tapfwd that
// no longer runs left: restored, or discarded with the reason.
type FeatureRecovery struct {
	JournalRecovery
	Restored NICFeatures // what was put back
}

func (r FeatureRecovery) String() string {
	return r.text("feature journal", "features", r.Restored.String())
}

// recover restores, or discards, the journals of this namespace whose
// writer no longer runs, as the NAPI journals' recover does: of NIC nic
// only, or of every NIC when nic is "".
func (js *featureJournals) recover(nic string, restore func(nic string, was NICFeatures) error) ([]FeatureRecovery, error) {
	return recoverJournals(js.journalDir, nic, ErrFeatureJournal, "features", js.read,
		func(j featureJournalFile, jr JournalRecovery) (FeatureRecovery, error) {
			r := FeatureRecovery{JournalRecovery: jr}
			if r.Discarded != "" {
				return r, nil
			}
			r.Restored = j.Was
			return r, restore(r.NIC, j.Was)
		})
}

// restoreFeatures sets was on NIC nic of this namespace.
func restoreFeatures(nic string, was NICFeatures) error {
	if was.GRO == nil {
		return nil
	}
	ns, err := netns.Open("")
	if err != nil {
		return err
	}
	defer ns.Close()
	return ns.SetGRO(nic, *was.GRO)
}

// setNICGRO turns the NIC's GRO as NIC.GRO asks (turnGRO).
func (d *Daemon) setNICGRO() error { return d.turnGRO(d.m.nic.Index) }

// reapplyGRO turns the GRO of a NIC made again, which the reattach found,
// as NIC.GRO asks: it came with the kernel's default.
func (d *Daemon) reapplyGRO() {
	ifi, err := net.InterfaceByName(d.c.NIC.Name)
	if err == nil {
		err = d.turnGRO(ifi.Index)
	}
	if err != nil {
		d.log.Warn("setting the GRO of the NIC that came back", "nic", d.c.NIC.Name, "err", err)
	}
}

// turnGRO turns the GRO of the NIC, ifindex, as NIC.GRO asks, once the
// journal holds what the NIC had; Close puts that back and removes the
// journal. A NIC that has it already is left alone, with nothing to put
// back.
func (d *Daemon) turnGRO(ifindex int) error {
	if d.c.NIC.GRO == ToggleAuto {
		return nil
	}
	nic, want := d.c.NIC.Name, d.c.NIC.GRO == ToggleOn
	ns, err := netns.Open("")
	if err != nil {
		return fail(PartNICGRO, d.c.NIC.GRO.String(), err)
	}
	defer ns.Close()
	was, err := ns.GRO(nic)
	if err != nil {
		return fail(PartNICGRO, d.c.NIC.GRO.String(), err)
	}
	if was == want {
		d.log.Info("NIC GRO as asked already: left alone", "nic", nic, "gro", onOff(want))
		return nil
	}
	if err := d.featJ.save(nic, ifindex, NICFeatures{GRO: &was}); err != nil {
		return fail(PartNICGRO, d.c.NIC.GRO.String(), fmt.Errorf("saving the journal before the change: %w", err))
	}
	d.undo.closing("putting back the NIC's GRO", func() error { return d.restoreGRO(nic, ifindex, was) })
	if err := ns.SetGRO(nic, want); err != nil {
		return fail(PartNICGRO, d.c.NIC.GRO.String(), err)
	}
	d.log.Info("NIC GRO", "nic", nic, "gro", onOff(want), "was", onOff(was))
	return nil
}

// restoreGRO puts back the GRO NIC nic, ifindex, had, unless the NIC was
// made again since (its GRO went with the old one), and removes the
// journal.
func (d *Daemon) restoreGRO(nic string, ifindex int, was bool) error {
	var err error
	if why := nicChanged(nic, ifindex); why != "" {
		d.log.Info("not putting back the NIC's GRO", "nic", nic, "reason", why)
	} else if err = restoreFeatures(nic, NICFeatures{GRO: &was}); err == nil {
		d.log.Info("put back the NIC's GRO", "nic", nic, "gro", onOff(was))
	}
	if err != nil {
		return err // the journal stays, for the next run or Down
	}
	return d.featJ.save(nic, ifindex, NICFeatures{})
}
