// Package stats holds the bench's statistics: medians, quantiles,
// percentile-bootstrap intervals, comparisons with verdicts, and a
// log-linear histogram of durations.
package stats
