package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/tapfwd/tapfwd/bench/compare"
	"github.com/tapfwd/tapfwd/bench/stats"
	"github.com/tapfwd/tapfwd/bench/throughput"
	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// compareFlags are the compare command's flags.
type compareFlags struct {
	asJSON, asMD *bool
	target       *float64
	seed         *uint64
	resamples    *int
}

func compareFlagSet(stdout io.Writer) (*flag.FlagSet, *compareFlags) {
	fs := newFlagSet("compare", "compare [flags] A.json B.json", stdout)
	f := &compareFlags{
		target: fs.Float64("target", stats.TargetHalfWidth, "widest interval that gets a verdict, as its half-width in percent of A's median; 0 for no limit"),
	}
	f.asJSON, f.asMD = addFormatFlags(fs, "comparison")
	f.seed, f.resamples = addBootstrapFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stdout, `Usage: tapfwd-bench compare [flags] A.json B.json

Compares two throughput reports saved with --json or --out (from two
kernels, two machines or two settings; schema 1 to 3): for every
configuration and workload both have, the ratio of B's median to A's with
its 95%% bootstrap interval (each run's repetitions resampled) and a
verdict, for the throughput, for its ratio to the bridge (each
repetition's figure over the bridge's in the same repetition: schema 3
runs with the bridge) and, where both runs measured it, for the whole
machine's CPU cost per unit delivered. A verdict needs %d repetitions
on each side and an interval within +-%.1f%% of A's median (--target).
The first table lists the rows that moved beyond their intervals.

Flags:
`, stats.MinReps, stats.TargetHalfWidth)
		cliflag.PrintDefaults(stdout, fs)
	}
	return fs, f
}

func cmdCompare(args []string, stdout io.Writer) error {
	fs, f := compareFlagSet(stdout)
	// Flags may come before, between or after the files.
	files, err := cliflag.ParseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(files) != 2:
		return cliflag.Misuse(fs, "compare takes two reports, A.json and B.json; got %d", len(files))
	case *f.asJSON && *f.asMD:
		return cliflag.Misuse(fs, "--json and --markdown: pick one")
	case *f.target < 0 || *f.target > 100:
		return cliflag.Misuse(fs, "--target %v: want 0 (no limit) to 100 percent", *f.target)
	case *f.resamples < 100:
		return cliflag.Misuse(fs, "--resamples %d: want at least 100", *f.resamples)
	}
	a, err := throughput.Read(files[0])
	if err != nil {
		return err
	}
	b, err := throughput.Read(files[1])
	if err != nil {
		return err
	}
	c := compare.Reports(a, b, files[0], files[1], stats.Bootstrap{Seed: *f.seed, Resamples: *f.resamples},
		stats.Rule{MinReps: stats.MinReps, MaxHalfWidth: *f.target})
	return printReport(stdout, c, *f.asJSON, *f.asMD)
}
