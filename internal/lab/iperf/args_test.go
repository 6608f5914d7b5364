package iperf

import (
	"strings"
	"testing"
	"time"
)

// TestClientArgs: iperf3's client flags for each option: whole seconds
// rounded up (at least one), -n instead of -t, -O, -l, -R, -u, -b, and -A
// with the wire's CPU alone.
func TestClientArgs(t *testing.T) {
	args := func(o Options, want string) {
		t.Helper()
		if got := strings.Join(o.clientArgs("198.18.1.2", "5201"), " "); got != want {
			t.Errorf("%+v:\n%s\nwant\n%s", o, got, want)
		}
	}
	args(Options{Duration: 5 * time.Second, Streams: 1}, "-c 198.18.1.2 -p 5201 -J -P 1 -t 5")
	args(Options{Duration: 1500 * time.Millisecond, Streams: 4}, "-c 198.18.1.2 -p 5201 -J -P 4 -t 2")
	args(Options{Duration: time.Millisecond, Streams: 1}, "-c 198.18.1.2 -p 5201 -J -P 1 -t 1")
	args(Options{Duration: 5 * time.Second, Bytes: 1 << 20, Streams: 1}, "-c 198.18.1.2 -p 5201 -J -P 1 -n 1048576")
	args(Options{Duration: 3 * time.Second, Omit: 500 * time.Millisecond, Len: 1400, Streams: 2, Reverse: true, UDP: true, Bitrate: "0",
		Pin: &Pinning{Wire: 1, Lab: 0}}, "-c 198.18.1.2 -p 5201 -J -P 2 -t 3 -O 1 -l 1400 -R -u -b 0 -A 1")
}

// TestWithDefaults: 5 s, one stream and a port in 20000..60000 for what
// is left zero; negative values and ports past 65535 are refused.
func TestWithDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.Duration != 5*time.Second || o.Streams != 1 || o.Port < 20000 || o.Port > 60000 {
		t.Errorf("defaults: %+v %v", o, err)
	}
	if o, err := (Options{Duration: time.Second, Streams: 3, Port: 5201}).withDefaults(); err != nil || o.Duration != time.Second || o.Streams != 3 || o.Port != 5201 {
		t.Errorf("given values: %+v %v", o, err)
	}
	for _, bad := range []Options{{Duration: -1}, {Bytes: -1}, {Omit: -time.Second}, {Len: -1}, {Streams: -1}, {Port: -1}, {Port: 65536}} {
		if _, err := bad.withDefaults(); err == nil || !strings.HasPrefix(err.Error(), "iperf: invalid options") {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
