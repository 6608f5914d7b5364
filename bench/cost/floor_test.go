package cost

import (
	"math"
	"testing"
	"time"
)

func TestFloor(t *testing.T) {
	// 10 GB/s: 125 MB per gigabit, copied twice, is 25 ms of CPU.
	if got := Floor(10e9); math.Abs(got-0.025) > 1e-12 {
		t.Errorf("Floor(10e9) = %v, want 0.025", got)
	}
	if Floor(0) != 0 || Floor(-1) != 0 {
		t.Error("a floor without a bandwidth")
	}
}

func TestCopyBandwidth(t *testing.T) {
	bw := CopyBandwidth(50 * time.Millisecond)
	// Any machine that runs the bench copies between 100 MB/s and 1 TB/s.
	if bw < 1e8 || bw > 1e12 {
		t.Errorf("CopyBandwidth = %.3g B/s", bw)
	}
}
