package throughput

import (
	"testing"
	"time"
)

// The report builders of the internal tests, for the tests of the
// renderings (view_test.go, package throughput_test).

func Synthetic(t *testing.T) *Report { return synthetic(t) }

func Noisy(t *testing.T, reps int, spread float64) *Report { return noisy(t, reps, spread) }

func BimodalReport(t *testing.T) *Report { return bimodalReport(t) }

func GuardRun(t *testing.T) *Report { return guardRun(t) }

func SequentialRun(t *testing.T, ratio, noise float64, budget, pause time.Duration) *Report {
	return sequentialRun(t, ratio, noise, budget, pause)
}

var GuardRatios = guardRatios
