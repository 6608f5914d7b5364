package matrix

import (
	"log/slog"
	"strings"

	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/stats"
)

// Common are the options every experiment takes.
type Common struct {
	// Lab names the binaries the beds start.
	Lab Lab
	// Configs to measure, in report order; nil means the experiment's
	// default.
	Configs []report.Config
	// Reps is the number of repetitions of every configuration; 0 means 3.
	Reps int
	// TUNFeatures are the kernel's TUNGETFEATURES flags; configurations
	// that need what is missing are skipped with the reason.
	TUNFeatures uint32
	// TapfwdFlags are the flags the tapfwd binary's `tapfwd run` takes
	// (forwarder.Supported); configurations that give one it lacks are
	// skipped with the reason. Nil checks none.
	TapfwdFlags map[string]bool
	// Bootstrap seeds the intervals.
	Bootstrap stats.Bootstrap
	// Progress, when set, is called before each run.
	Progress func(Progress)
	// Log receives one line per bed and per failure; nil discards.
	Log *slog.Logger
}

// Defaults fills in what c leaves unset: the configurations def returns,
// 3 repetitions, a log that discards (which the Lab logs to as well).
func (c *Common) Defaults(def func() []report.Config) {
	if c.Configs == nil {
		c.Configs = def()
	}
	if c.Reps <= 0 {
		c.Reps = 3
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.Lab.Log = c.Log
}

// ErrLine is the first line of err's text: what a failed run records.
func ErrLine(err error) string {
	s := strings.TrimSpace(err.Error())
	s, _, _ = strings.Cut(s, "\n")
	return s
}
