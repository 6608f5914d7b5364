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
