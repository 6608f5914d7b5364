// Package matrix runs an experiment's configurations over its rows on fresh one-host
// or two-host test beds: interleaved repetitions, retry and skip rules, progress, host probes.
package matrix
