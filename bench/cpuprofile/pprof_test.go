package cpuprofile

import (
	"bytes"
	"compress/gzip"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// handmade is a profile.proto written field by field: two sample types
// (samples/count, cpu/nanoseconds), a location holding an inlined call
// (two lines, the inlined function first), and two samples, one with
// its location ids packed and one not.
func handmade() []byte {
	msg := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	varint := func(n protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, n, protowire.VarintType), v)
	}
	bytesField := func(n protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, n, protowire.BytesType), b)
	}
	packed := func(n protowire.Number, vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = protowire.AppendVarint(b, v)
		}
		return bytesField(n, b)
	}
	strs := []string{"", "samples", "count", "cpu", "nanoseconds", "main.leaf", "main.inlined", "main.caller", "main.root"}
	var p []byte
	p = append(p, bytesField(profSampleType, msg(varint(valueTypeType, 1), varint(2, 2)))...)
	p = append(p, bytesField(profSampleType, msg(varint(valueTypeType, 3), varint(2, 4)))...)
	// Functions 1..4: leaf, inlined, caller, root.
	for id := uint64(1); id <= 4; id++ {
		p = append(p, bytesField(profFunction, msg(varint(functionID, id), varint(functionName, id+4)))...)
	}
	// Location 10: leaf; 20: inlined into caller; 30: root.
	line := func(fn uint64) []byte { return bytesField(locationLine, varint(lineFunction, fn)) }
	p = append(p, bytesField(profLocation, msg(varint(locationID, 10), line(1)))...)
	p = append(p, bytesField(profLocation, msg(varint(locationID, 20), line(2), line(3)))...)
	p = append(p, bytesField(profLocation, msg(varint(locationID, 30), line(4)))...)
	p = append(p, bytesField(profSample, msg(packed(sampleLocation, 10, 20, 30), packed(sampleValue, 3, 30e6)))...)
	p = append(p, bytesField(profSample, msg(varint(sampleLocation, 20), varint(sampleLocation, 30), varint(sampleValue, 1), varint(sampleValue, 10e6)))...)
	for _, s := range strs {
		p = append(p, bytesField(profStrings, []byte(s))...)
	}
	return append(p, varint(profDuration, uint64(2*time.Second))...)
}

func TestParsePprofHandmade(t *testing.T) {
	for _, zipped := range []bool{false, true} {
		b := handmade()
		if zipped {
			var z bytes.Buffer
			w := gzip.NewWriter(&z)
			w.Write(b)
			w.Close()
			b = z.Bytes()
		}
		p, err := ParsePprof(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Samples) != 2 || p.Duration != 2*time.Second || p.Total() != 40*time.Millisecond {
			t.Fatalf("zipped %v: %+v", zipped, p)
		}
		if got := strings.Join(p.Samples[0].Stack, " "); got != "main.leaf main.inlined main.caller main.root" || p.Samples[0].Nanos != 30e6 {
			t.Errorf("sample 0: %q %d", got, p.Samples[0].Nanos)
		}
		if got := strings.Join(p.Samples[1].Stack, " "); got != "main.inlined main.caller main.root" || p.Samples[1].Nanos != 10e6 {
			t.Errorf("sample 1 (unpacked): %q %d", got, p.Samples[1].Nanos)
		}
		top := p.Top(2)
		if len(top) != 2 || top[0].Name != "main.leaf" || top[0].FlatPct != 75 || top[1].Name != "main.inlined" || top[1].CumPct != 100 {
			t.Errorf("Top: %+v", top)
		}
	}
	for _, bad := range [][]byte{{0x1f, 0x8b, 1, 2}, {0x0a, 0x05, 1}, handmade()[:10]} {
		if _, err := ParsePprof(bad); err == nil {
			t.Errorf("ParsePprof(% x) took it", bad)
		}
	}
}

//go:noinline
func spin(until time.Time) (x uint64) {
	for time.Now().Before(until) {
		for i := range 1 << 16 {
			x += uint64(i) * x
		}
	}
	return x
}

// TestParsePprofGo parses a real CPU profile of this test spinning in
// one of tapfwd's functions and making system calls: its samples are
// there, spin's share is the worker's code, the calls are system calls.
func TestParsePprofGo(t *testing.T) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		until := time.Now().Add(1500 * time.Millisecond)
		for time.Now().Before(until) {
			os.Getppid()
		}
	}()
	spin(time.Now().Add(1500 * time.Millisecond))
	<-done
	pprof.StopCPUProfile()
	p, err := ParsePprof(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if p.Total() < 50*time.Millisecond || p.Duration < time.Second {
		t.Fatalf("%v of samples over %v", p.Total(), p.Duration)
	}
	found := false
	for _, f := range p.Top(1000) {
		found = found || f.Name == module+"bench/cpuprofile.spin"
	}
	shares := GoShares(p)
	sum := 0.0
	by := map[string]float64{}
	for _, s := range shares {
		sum += s.Percent
		by[s.Name] = s.Percent
	}
	if !found || math.Abs(sum-100) > 0.01 || by[Worker] == 0 || by[OtherSyscall] == 0 || len(shares) != len(GoShareNames) {
		t.Errorf("spin in the profile: %v; shares %+v (sum %.2f)", found, shares, sum)
	}
}
