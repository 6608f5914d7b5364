//go:build race

package rr

const raceEnabled = true
