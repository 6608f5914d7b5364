// Package testkit holds the end-to-end test helpers: tapfwd started on a
// test bed, traffic makers, and readers of its metrics and kernel counters.
//
// Only tests import it. Every helper takes the test's testing.TB and fails
// or skips it on its own; none imports the benchmark (bench/).
package testkit
