// Package matrix runs an experiment's configurations over its rows on
// fresh test beds: interleaved repetitions, the retry and skip rules,
// progress, and the host and kernel probes both benches share.
package matrix
