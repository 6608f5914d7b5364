//go:build !race

package rr

const raceEnabled = false
