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
	return list, CheckAllowed(list)
}

// CheckAllowed says whether this process may run on every CPU of list (its
// affinity mask, which sched_setaffinity holds a worker to).
func CheckAllowed(list []int) error {
	allowed, err := Allowed()
	if err != nil {
		return err
	}
	for _, c := range list {
		if !slices.Contains(allowed, c) {
			return fmt.Errorf("%q is not a CPU this process may use (allowed: %s)", strconv.Itoa(c), Format(allowed))
		}
	}
	return nil
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

// Online is the CPUs the kernel runs now (/sys/devices/system/cpu/online):
// those a kthread may be pinned to.
func Online() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("reading the online CPUs: %w", err)
	}
	return parse(strings.TrimSpace(string(b)))
}

// Format writes list the way Parse reads it, runs of consecutive CPUs as
// ranges: "0-3,6".
func Format(list []int) string {
	var b strings.Builder
	for i := 0; i < len(list); i++ {
		j := i
		for j+1 < len(list) && list[j+1] == list[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(list[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(list[j]))
		}
		i = j
	}
	return b.String()
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
