package cpulist

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Max is one past the highest CPU number a list may hold: the size of the
// affinity mask sched_getaffinity fills (unix.CPUSet).
const Max = 1024

// Parse parses a comma-separated list of CPU numbers and ranges, "0,2-4, 7",
// in the order given (duplicates kept). Every CPU must be below Max.
func Parse(s string) ([]int, error) {
	list, err := parse(s)
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		if c >= Max {
			return nil, fmt.Errorf("CPU %d out of range", c)
		}
	}
	return list, nil
}

// ParseAllowed is Parse, and every CPU must be one this process may run on
// (its affinity mask).
func ParseAllowed(s string) ([]int, error) {
	list, err := parse(s)
	if err != nil {
		return nil, err
	}
	allowed, err := Allowed()
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		if !slices.Contains(allowed, c) {
			return nil, fmt.Errorf("%q is not a CPU this process may use (%d allowed)", strconv.Itoa(c), len(allowed))
		}
	}
	return list, nil
}

// Allowed returns the CPUs this process may run on (its affinity mask), in
// ascending order.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading this process's CPUs: %w", os.NewSyscallError("sched_getaffinity", err))
	}
	out := make([]int, 0, set.Count())
	for c := range Max {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// parse checks the syntax only.
func parse(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a CPU number (in %q)", part, s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU range %q in %q", part, s)
			}
		}
		if b >= 1<<20 {
			return nil, fmt.Errorf("CPU %d out of range", b)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
