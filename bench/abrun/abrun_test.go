package abrun

import (
	"math"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/bench/stats"
)

// guard20ms is the guard of the headline figures: the first 20 ms of
// every window left out (stats.ABGuards[1]).
const guard20ms = 1

const netDev = `Inter-|   Receive                                                |  Transmit

 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
tfwtap-a1b2c3: 123456789  4567    0    3    0     0          0         0   987654    321    0    0    0     0       0          0
`

func TestDevCounters(t *testing.T) {
	b, p, err := devCounters([]byte(netDev), "tfwtap-a1b2c3", true)
	if err != nil || b != 123456789 || p != 4567 {
		t.Errorf("rx = %d, %d, %v; want 123456789, 4567", b, p, err)
	}
	b, p, err = devCounters([]byte(netDev), "tfwtap-a1b2c3", false)
	if err != nil || b != 987654 || p != 321 {
		t.Errorf("tx = %d, %d, %v; want 987654, 321", b, p, err)
	}
	if _, _, err := devCounters([]byte(netDev), "tfwtap-a1b2c", true); err == nil {
		t.Error("a name that is only a prefix of a device was found")
	}
	if _, _, err := devCounters([]byte("x: 1 2\n"), "x", true); err == nil {
		t.Error("a short line gave no error")
	}
}

func TestFirstInt(t *testing.T) {
	for in, want := range map[string]int64{"123 456 7\n": 123, "0": 0, "98765432101234 1 1": 98765432101234} {
		if v, ok := firstInt([]byte(in)); !ok || v != want {
			t.Errorf("firstInt(%q) = %d, %v; want %d", in, v, ok, want)
		}
	}
	if _, ok := firstInt([]byte(" 1")); ok {
		t.Error("a leading space parsed")
	}
}

// samplesFor makes the samples of windows whose arms are arms: arm A
// delivers rateA bytes a second, arm B rateB, each bin at its nominal
// length, the CPU of every role one per second.
func samplesFor(arms []int, rateA, rateB float64) []sample {
	var out []sample
	var at time.Duration
	var bytesN float64
	var cpu RoleCPU
	add := func() {
		out = append(out, sample{at: at, bytes: uint64(bytesN), frames: uint64(bytesN / 100), cpu: cpu})
	}
	for _, arm := range arms {
		for b := range stats.ABBins {
			add()
			d := 20 * time.Millisecond
			if b == stats.ABBins-1 {
				d = Window - 40*time.Millisecond
			}
			rate := rateA
			if arm == 1 {
				rate = rateB
			}
			at += d
			bytesN += rate * d.Seconds()
			for i := range cpu {
				cpu[i] += d.Seconds()
			}
		}
	}
	add()
	return out
}

func TestFill(t *testing.T) {
	arms := stats.ABSchedule(7, 8)
	smp := samplesFor(arms, 1e9, 1.2e9)
	tcp := make([]tcpSample, len(arms)+1)
	for i := range tcp {
		tcp[i] = tcpSample{retrans: int64(3 * i), ofo: int64(i)}
	}
	var r Record
	r.fill(arms, smp, tcp)
	if len(r.Windows) != 8 || r.Seconds < 0.79 || r.Seconds > 0.81 {
		t.Fatalf("%d windows over %.3f s; want 8 over 0.8", len(r.Windows), r.Seconds)
	}
	d, ok := stats.RunEffect(r.Windows, guard20ms)
	if !ok || math.Abs(math.Exp(d)-1.2) > 1e-6 {
		t.Errorf("effect = %v (%v); want log 1.2", math.Exp(d), ok)
	}
	for i := range arms {
		if r.Retrans[i] != 3 || r.OFO[i] != 1 || r.Switched[i] != (i > 0 && arms[i-1] != arms[i]) {
			t.Fatalf("window %d: retrans %d ofo %d switched %v", i, r.Retrans[i], r.OFO[i], r.Switched[i])
		}
	}
	if got := r.Own; math.Abs(got-float64(nRoles)*0.8) > 1e-9 {
		t.Errorf("own CPU = %v; want %v", got, float64(nRoles)*0.8)
	}
	if a, b := r.ArmCPU[0][RoleTapfwd], r.ArmCPU[1][RoleTapfwd]; math.Abs(a-0.4) > 1e-9 || math.Abs(b-0.4) > 1e-9 {
		t.Errorf("tapfwd's CPU by arm = %v, %v; want 0.4 each (ABBA: half the windows each)", a, b)
	}
}
