package cpuprofile

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// CPUProfile is a CPU profile as its samples: the pprof format Go's
// /debug/pprof/profile serves (profile.proto), or perf's samples.
type CPUProfile struct {
	Samples []Sample
	// Duration is how long the profile ran; 0 when it does not say.
	Duration time.Duration
}

// Sample is one stack and the CPU time it stands for.
type Sample struct {
	// Stack is the function names, leaf first; inlined calls are frames
	// of their own.
	Stack []string
	Nanos int64
}

// Total is the CPU time of every sample.
func (p *CPUProfile) Total() time.Duration {
	var n int64
	for _, s := range p.Samples {
		n += s.Nanos
	}
	return time.Duration(n)
}

// The fields of profile.proto this parser reads.
const (
	profSampleType = 1
	profSample     = 2
	profLocation   = 4
	profFunction   = 5
	profStrings    = 6
	profDuration   = 10

	sampleLocation = 1
	sampleValue    = 2
	locationID     = 1
	locationLine   = 4
	lineFunction   = 1
	functionID     = 1
	functionName   = 2
	valueTypeType  = 1
)

// ParsePprof reads a profile in the pprof format, gzipped (as Go
// serves it) or not. The CPU time of a sample is its "cpu" value (in
// nanoseconds, as Go writes it), else its last value.
func ParsePprof(b []byte) (*CPUProfile, error) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
		if b, err = io.ReadAll(z); err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
	}
	var raw rawProfile
	if err := raw.decode(b); err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return raw.profile()
}

// rawProfile is profile.proto's messages as read, before their ids are
// resolved.
type rawProfile struct {
	types     []int64 // string index of each sample type
	samples   []rawSample
	locations map[uint64][]uint64 // location id -> function ids, leaf first
	functions map[uint64]int64    // function id -> string index of its name
	strings   []string
	duration  int64
}

type rawSample struct {
	locs   []uint64
	values []int64
}

// fields calls fn for each field of message b.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// varints appends a repeated integer field, packed (v) or not (x).
func varints(dst []uint64, typ protowire.Type, v []byte, x uint64) ([]uint64, error) {
	if typ == protowire.VarintType {
		return append(dst, x), nil
	}
	for len(v) > 0 {
		y, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		dst, v = append(dst, y), v[n:]
	}
	return dst, nil
}

func (p *rawProfile) decode(b []byte) error {
	p.locations, p.functions = map[uint64][]uint64{}, map[uint64]int64{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case profSampleType:
			return p.decodeType(v)
		case profSample:
			return p.decodeSample(v)
		case profLocation:
			return p.decodeLocation(v)
		case profFunction:
			return p.decodeFunction(v)
		case profStrings:
			p.strings = append(p.strings, string(v))
		case profDuration:
			p.duration = int64(x)
		}
		return nil
	})
}

func (p *rawProfile) decodeType(b []byte) error {
	t := int64(0)
	err := fields(b, func(num protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
		if num == valueTypeType {
			t = int64(x)
		}
		return nil
	})
	p.types = append(p.types, t)
	return err
}

func (p *rawProfile) decodeSample(b []byte) error {
	var s rawSample
	var vals []uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) (err error) {
		switch num {
		case sampleLocation:
			s.locs, err = varints(s.locs, typ, v, x)
		case sampleValue:
			vals, err = varints(vals, typ, v, x)
		}
		return err
	})
	for _, v := range vals {
		s.values = append(s.values, int64(v))
	}
	p.samples = append(p.samples, s)
	return err
}

func (p *rawProfile) decodeLocation(b []byte) error {
	var id uint64
	var funcs []uint64
	err := fields(b, func(num protowire.Number, _ protowire.Type, v []byte, x uint64) error {
		switch num {
		case locationID:
			id = x
		case locationLine:
			return fields(v, func(num protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				if num == lineFunction {
					funcs = append(funcs, x)
				}
				return nil
			})
		}
		return nil
	})
	p.locations[id] = funcs
	return err
}

func (p *rawProfile) decodeFunction(b []byte) error {
	var id uint64
	var name int64
	err := fields(b, func(num protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
		switch num {
		case functionID:
			id = x
		case functionName:
			name = int64(x)
		}
		return nil
	})
	p.functions[id] = name
	return err
}

// str is string index i, or "?" out of range (a corrupt profile).
func (p *rawProfile) str(i int64) string {
	if i < 0 || i >= int64(len(p.strings)) {
		return "?"
	}
	return p.strings[i]
}

// profile resolves the ids: each sample's stack of function names and
// its CPU time.
func (p *rawProfile) profile() (*CPUProfile, error) {
	if len(p.types) == 0 {
		return nil, errors.New("profile: no sample type")
	}
	vi := len(p.types) - 1
	for i, t := range p.types {
		if p.str(t) == "cpu" {
			vi = i
		}
	}
	out := &CPUProfile{Duration: time.Duration(p.duration)}
	for _, s := range p.samples {
		if vi >= len(s.values) {
			return nil, fmt.Errorf("profile: a sample has %d values, want %d", len(s.values), len(p.types))
		}
		var stack []string
		for _, l := range s.locs {
			for _, f := range p.locations[l] {
				stack = append(stack, p.str(p.functions[f]))
			}
		}
		out.Samples = append(out.Samples, Sample{Stack: stack, Nanos: s.values[vi]})
	}
	return out, nil
}

// FuncTime is a function's share of a profile: Flat in it, Cum in it
// and what it called, in seconds and in percent of the profile's total.
type FuncTime struct {
	Name    string  `json:"name"`
	Flat    float64 `json:"flat_seconds"`
	FlatPct float64 `json:"flat_percent"`
	Cum     float64 `json:"cum_seconds"`
	CumPct  float64 `json:"cum_percent"`
}

// Top is the n functions with the most flat time, most first.
func (p *CPUProfile) Top(n int) []FuncTime {
	flat, cum := map[string]int64{}, map[string]int64{}
	for _, s := range p.Samples {
		if len(s.Stack) == 0 {
			continue
		}
		flat[s.Stack[0]] += s.Nanos
		seen := map[string]bool{}
		for _, f := range s.Stack {
			if !seen[f] {
				seen[f] = true
				cum[f] += s.Nanos
			}
		}
	}
	total := float64(p.Total())
	var out []FuncTime
	for f, v := range flat {
		out = append(out, FuncTime{Name: f, Flat: float64(v) / 1e9, FlatPct: Percent(float64(v), total),
			Cum: float64(cum[f]) / 1e9, CumPct: Percent(float64(cum[f]), total)})
	}
	slices.SortFunc(out, func(a, b FuncTime) int {
		return cmp.Or(cmp.Compare(b.Flat, a.Flat), cmp.Compare(a.Name, b.Name))
	})
	return out[:min(n, len(out))]
}

// Percent is v in percent of total; 0 without a total.
func Percent(v, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return 100 * v / total
}
