package matrix

import "time"

// Progress says where a run is.
type Progress struct {
	Config    string
	Rep, Reps int    // Rep counts from 1; Reps is 0 for a step outside the repetitions
	Row       string // the workload or point
	Done      int    // runs finished
	Total     int    // runs planned (shrinks when a configuration is skipped)
	Elapsed   time.Duration
	Left      time.Duration // estimate
}

// Meter counts the runs and estimates the time left from the mean time per
// run so far.
type Meter struct {
	progress func(Progress)
	reps     int
	guess    time.Duration
	start    time.Time
	done     int
	total    int
}

// NewMeter is a Meter of total runs in reps repetitions, calling progress
// (when not nil) before each; guess is a run's time until one has finished.
func NewMeter(progress func(Progress), total, reps int, guess time.Duration) *Meter {
	return &Meter{progress: progress, reps: reps, guess: guess, start: time.Now(), total: total}
}

// Step reports the run of config's row in repetition rep about to start.
func (m *Meter) Step(config string, rep int, row string) {
	m.Note(Progress{Config: config, Rep: rep, Reps: m.reps, Row: row})
}

// Note reports p with the counts and times filled in.
func (m *Meter) Note(p Progress) {
	if m.progress == nil {
		return
	}
	p.Done, p.Total = m.done, m.total
	p.Elapsed = time.Since(m.start)
	per := m.guess
	if m.done > 0 {
		per = p.Elapsed / time.Duration(m.done)
	}
	p.Left = per * time.Duration(m.total-m.done)
	m.progress(p)
}

// plan makes the repetitions planned reps, each of perRep runs.
func (m *Meter) plan(reps, perRep int) {
	m.total += (reps - m.reps) * perRep
	m.reps = reps
}

// Done counts a finished run.
func (m *Meter) Done() { m.done++ }
