package napi

import (
	"fmt"
	"slices"
	"sync"
)

// Journal keeps the steps that undo the changes of the Changes that write
// to it (Changes.UseJournal), oldest first, for one device, and hands the
// whole Record to save before each change is made and once changes are
// undone: a copy that outlives the process, should it die before its
// Restore. save with no steps left means nothing is to be undone. Several
// Changes may share a Journal; it is safe for concurrent use.
type Journal struct {
	mu      sync.Mutex
	ifindex int
	entries []*entry
	save    func(Record) error
}

// entry is one step in a Journal.
type entry struct{ step Step }

// NewJournal returns an empty Journal of the changes to the device
// ifindex, which saves through save.
func NewJournal(ifindex int, save func(Record) error) *Journal {
	return &Journal{ifindex: ifindex, save: save}
}

// Record returns the steps the Journal holds now.
func (j *Journal) Record() Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.record()
}

func (j *Journal) record() Record {
	r := Record{Ifindex: j.ifindex, Steps: []Step{}}
	for _, e := range j.entries {
		r.Steps = append(r.Steps, e.step)
	}
	return r
}

// add appends s and saves; on a failed save s is not kept.
func (j *Journal) add(s Step) (*entry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := &entry{s}
	j.entries = append(j.entries, e)
	if err := j.save(j.record()); err != nil {
		j.entries = j.entries[:len(j.entries)-1]
		return nil, fmt.Errorf("save the NAPI journal before changing %s: %w", s, err)
	}
	return e, nil
}

// drop forgets the entries done (nil ones are skipped) and saves.
func (j *Journal) drop(done ...*entry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = slices.DeleteFunc(j.entries, func(e *entry) bool { return slices.Contains(done, e) })
	if err := j.save(j.record()); err != nil {
		return fmt.Errorf("save the NAPI journal: %w", err)
	}
	return nil
}
