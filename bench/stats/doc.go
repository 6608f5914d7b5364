// Package stats holds the bench's statistics: medians, bootstrap intervals,
// comparisons with verdicts, and a log-linear histogram of durations.
package stats
