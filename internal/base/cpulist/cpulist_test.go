package cpulist

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("0,2-4, 7")
	if err != nil || !slices.Equal(got, []int{0, 2, 3, 4, 7}) {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if got, err := Parse("3,3"); err != nil || !slices.Equal(got, []int{3, 3}) {
		t.Errorf("duplicates: %v, %v", got, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"1-0", "bad CPU range"}, {"x", `"x" is not a CPU`}, {"", "is not a CPU"}, {"-1", "is not a CPU"},
		{"1,", "is not a CPU"}, {"2-x", "bad CPU range"}, {"1024", "out of range"}, {"0-99999999", "out of range"},
	} {
		if _, err := Parse(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestParseAllowed(t *testing.T) {
	allowed, err := Allowed()
	if err != nil || len(allowed) == 0 {
		t.Fatalf("Allowed() = %v, %v", allowed, err)
	}
	first := allowed[0]
	s := strconv.Itoa(first)
	if got, err := ParseAllowed(s + "," + s); err != nil || !slices.Equal(got, []int{first, first}) {
		t.Errorf("ParseAllowed(%q) = %v, %v", s, got, err)
	}
	if _, err := ParseAllowed("0,4096"); err == nil || !strings.Contains(err.Error(), `"4096" is not a CPU this process may use`) {
		t.Errorf("4096: %v", err)
	}
	if _, err := ParseAllowed("x,0"); err == nil || !strings.Contains(err.Error(), `"x" is not a CPU`) {
		t.Errorf("x: %v", err)
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[string]string{"0": "0", "0-3,6": "0-3,6", "0,2,4": "0,2,4", "1,2,3,5-6": "1-3,5-6", "3,2": "3,2"} {
		list, _ := Parse(in)
		if got := Format(list); got != want {
			t.Errorf("Format(%v) = %q, want %q", list, got, want)
		}
	}
	if got := Format(nil); got != "" {
		t.Errorf("Format(nil) = %q", got)
	}
}

// TestCheckAllowed: a CPU outside the affinity mask is refused with the
// CPUs that are allowed.
func TestCheckAllowed(t *testing.T) {
	allowed, err := Allowed()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckAllowed(allowed); err != nil {
		t.Errorf("CheckAllowed(%v): %v", allowed, err)
	}
	err = CheckAllowed([]int{allowed[0], Max - 1})
	if err == nil || !strings.Contains(err.Error(), "allowed: "+Format(allowed)+")") {
		t.Errorf("CheckAllowed with CPU %d: %v", Max-1, err)
	}
}

func TestOnline(t *testing.T) {
	list, err := Online()
	if err != nil || len(list) == 0 || !slices.Contains(list, 0) {
		t.Errorf("Online() = %v, %v; want a list with CPU 0", list, err)
	}
}
