//go:build race

package testkit

// raceEnabled says the race detector is on in this test binary.
const raceEnabled = true
