package napi

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// recorded reads testdata/name: netlink messages recorded from a kernel, one
// per line in hex, # starting a comment.
func recorded(t testing.TB, name string) []genetlink.Message {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []genetlink.Message
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var nm netlink.Message
		if err := nm.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: netlink message: %v", name, err)
		}
		var gm genetlink.Message
		if err := gm.UnmarshalBinary(nm.Data); err != nil {
			t.Fatalf("%s: generic netlink message: %v", name, err)
		}
		out = append(out, gm)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseNAPIRecorded(t *testing.T) {
	msgs := recorded(t, "napi_get_dump.hex")
	want := []NAPI{
		{ID: 258, Ifindex: 2, IRQ: -1},
		{ID: 258, Ifindex: 2, IRQ: -1, PID: 30801, Threaded: ThreadedEnabled, DeferHardIRQs: 2,
			GROFlushTimeout: 200 * time.Microsecond, IRQSuspendTimeout: 20 * time.Millisecond},
		{ID: 258, Ifindex: 2, IRQ: -1, PID: 30801, Threaded: ThreadedEnabled, DeferHardIRQs: 2,
			GROFlushTimeout: 5 * time.Second, IRQSuspendTimeout: 6 * time.Second},
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d recorded messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if m.Header.Command != cmdNAPIGet {
			t.Errorf("message %d: command %d, want %d", i, m.Header.Command, cmdNAPIGet)
		}
		got, err := parseNAPI(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got != want[i] {
			t.Errorf("message %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

// attr encodes one netlink attribute (include/uapi/linux/netlink.h:
// struct nlattr, padded to 4 bytes).
func attr(typ uint16, data []byte) []byte {
	b := make([]byte, 4, 4+len(data)+3)
	binary.NativeEndian.PutUint16(b, uint16(4+len(data)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func TestParseNAPIUnknownAndWidths(t *testing.T) {
	base := recorded(t, "napi_get_dump.hex")[1].Data
	want, err := parseNAPI(base)
	if err != nil {
		t.Fatal(err)
	}
	// Attributes a later kernel might add, before and after the known ones:
	// a plain one, a nested one and an odd-sized one.
	var b []byte
	b = append(b, attr(42, u64(7))...)
	b = append(b, base...)
	b = append(b, attr(9, u32(1))...)
	b = append(b, attr(0x8000|10, attr(1, u32(3)))...)
	b = append(b, attr(11, []byte{1, 2, 3})...)
	got, err := parseNAPI(b)
	if err != nil {
		t.Fatalf("unknown attributes: %v", err)
	}
	if got != want {
		t.Errorf("unknown attributes changed the result:\n got %+v\nwant %+v", got, want)
	}

	// Every known integer read from 8 bytes too.
	wide := attr(attrNAPIID, u64(258))
	wide = append(wide, attr(attrNAPIIfindex, u64(2))...)
	wide = append(wide, attr(attrNAPIIRQ, u64(33))...)
	wide = append(wide, attr(attrNAPIPID, u64(30801))...)
	wide = append(wide, attr(attrNAPIThreaded, u64(2))...)
	wide = append(wide, attr(attrNAPIDeferHardIRQs, u64(1))...)
	got, err = parseNAPI(wide)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != 258 || got.Ifindex != 2 || got.IRQ != 33 || got.PID != 30801 || got.Threaded != ThreadedBusyPoll || got.DeferHardIRQs != 1 {
		t.Errorf("8-byte integers: %+v", got)
	}

	// Neither 4 nor 8 bytes: an error, not a guess.
	if _, err := parseNAPI(append(attr(attrNAPIID, u32(258)), attr(attrNAPIPID, []byte{1, 2})...)); err == nil {
		t.Error("2-byte pid accepted")
	}
	if _, err := parseNAPI(attr(attrNAPIIfindex, u32(2))); err == nil {
		t.Error("reply without an id accepted")
	}
	if _, err := parseNAPI([]byte{8, 0, 2}); err == nil {
		t.Error("truncated attribute accepted")
	}
}

func TestParseQueueRecorded(t *testing.T) {
	msgs := recorded(t, "queue_get_dump.hex")
	want := []Queue{
		{ID: 0, Ifindex: 2, Type: QueueRX},
		{ID: 0, Ifindex: 2, Type: QueueTX},
		{ID: 0, Ifindex: 3, Type: QueueRX},
		{ID: 0, Ifindex: 3, Type: QueueTX},
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d recorded messages, want %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		got, err := parseQueue(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if got != want[i] {
			t.Errorf("message %d: got %+v, want %+v", i, got, want[i])
		}
	}
	// A NIC queue with its NAPI, in 8 bytes, plus an unknown attribute
	// (6.14's io-uring, 6.15's xsk are nested ones).
	b := append(msgs[0].Data, attr(attrQueueNAPIID, u64(8193))...)
	b = append(b, attr(0x8000|7, nil)...)
	q, err := parseQueue(b)
	if err != nil || q.NAPIID != 8193 || q.Type != QueueRX || q.Ifindex != 2 {
		t.Errorf("queue with NAPI: %+v, %v", q, err)
	}
}

// patchPolicy returns msgs with the threaded attribute's maximum replaced by
// max, or that attribute's message dropped when max is negative.
func patchPolicy(t *testing.T, msgs []genetlink.Message, max int) []genetlink.Message {
	t.Helper()
	// The recorded threaded entry: policy 0, attribute 8, then
	// MIN_VALUE_U 0 and MAX_VALUE_U 1 as u64s.
	marker, _ := hex.DecodeString("240008800c00040000000000000000000c000500")
	var out []genetlink.Message
	found := false
	for _, m := range msgs {
		i := strings.Index(string(m.Data), string(marker))
		if i < 0 {
			out = append(out, m)
			continue
		}
		found = true
		if max < 0 {
			continue
		}
		d := append([]byte(nil), m.Data...)
		binary.NativeEndian.PutUint64(d[i+len(marker):], uint64(max))
		out = append(out, genetlink.Message{Header: m.Header, Data: d})
	}
	if !found {
		t.Fatal("threaded policy entry not found in the recording")
	}
	return out
}

func TestFeaturesFromPolicy(t *testing.T) {
	msgs := recorded(t, "getpolicy_napi_set.hex")
	for _, tc := range []struct {
		name string
		msgs []genetlink.Message
		want Features
	}{
		{"6.18 as recorded", msgs, Features{NAPIGet: true, NAPISet: true, Threaded: true}},
		{"6.19: threaded max 2", patchPolicy(t, msgs, 2), Features{NAPIGet: true, NAPISet: true, Threaded: true, BusyPoll: true}},
		{"6.13 to 6.16: no threaded attribute", patchPolicy(t, msgs, -1), Features{NAPIGet: true, NAPISet: true}},
	} {
		p, err := parsePolicy(tc.msgs, cmdNAPISet)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := featuresFrom(true, p, true); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	p, err := parsePolicy(msgs, cmdNAPISet)
	if err != nil {
		t.Fatal(err)
	}
	if th := p[attrNAPIThreaded]; th.typ != 4 || !th.hasMax || th.maxU != 1 { // NL_ATTR_TYPE_U32
		t.Errorf("threaded policy: %+v", th)
	}
	if d := p[attrNAPIDeferHardIRQs]; d.maxU != maxDeferHardIRQs {
		t.Errorf("defer-hard-irqs max %d, want %d", d.maxU, maxDeferHardIRQs)
	}
	if got := featuresFrom(true, nil, false); got != (Features{NAPIGet: true}) {
		t.Errorf("no napi-set (6.9 to 6.12): %+v", got)
	}
	// Another op's policy in the same dump is not mistaken for napi-set's.
	if p, err := parsePolicy(msgs, cmdNAPIGet); err != nil || len(p) != 0 {
		t.Errorf("napi-get from a napi-set dump: %v, %v", p, err)
	}
}

func TestEncodeSet(t *testing.T) {
	b, err := encodeSet(258, Attrs{
		Threaded:          new(ThreadedEnabled),
		DeferHardIRQs:     new(uint32(2)),
		GROFlushTimeout:   new(5 * time.Second),
		IRQSuspendTimeout: new(20 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := attr(attrNAPIID, u32(258))
	want = append(want, attr(attrNAPIDeferHardIRQs, u32(2))...)
	want = append(want, attr(attrNAPIGROFlushTimeout, u64(5e9))...)
	want = append(want, attr(attrNAPIIRQSuspendTimeout, u64(20e6))...)
	want = append(want, attr(attrNAPIThreaded, u32(1))...)
	if string(b) != string(want) {
		t.Errorf("napi-set request:\n got %x\nwant %x", b, want)
	}
	// The request decodes with the reply decoder, as the kernel would.
	n, err := parseNAPI(b)
	if err != nil || n.ID != 258 || n.Threaded != ThreadedEnabled || n.GROFlushTimeout != 5*time.Second || n.IRQSuspendTimeout != 20*time.Millisecond {
		t.Errorf("round trip: %+v, %v", n, err)
	}
	b, err = encodeSet(7, Attrs{})
	if err != nil || string(b) != string(attr(attrNAPIID, u32(7))) {
		t.Errorf("empty Attrs: %x, %v", b, err)
	}
	for _, a := range []Attrs{
		{GROFlushTimeout: new(-time.Nanosecond)},
		{IRQSuspendTimeout: new(-time.Second)},
		{DeferHardIRQs: new(uint32(1 << 31))},
	} {
		if _, err := encodeSet(1, a); err == nil {
			t.Errorf("encodeSet accepted %+v", a)
		}
	}
}

func TestAttrsFrom(t *testing.T) {
	cur := NAPI{Threaded: ThreadedEnabled, DeferHardIRQs: 3, GROFlushTimeout: time.Millisecond}
	p := Attrs{Threaded: new(ThreadedDisabled), GROFlushTimeout: new(time.Duration(0))}.from(cur)
	if p.Threaded == nil || *p.Threaded != ThreadedEnabled || p.GROFlushTimeout == nil || *p.GROFlushTimeout != time.Millisecond {
		t.Errorf("previous values: %+v", p)
	}
	if p.DeferHardIRQs != nil || p.IRQSuspendTimeout != nil {
		t.Errorf("fields not set are recorded: %+v", p)
	}
}

func TestThreadedText(t *testing.T) {
	for i, s := range []string{"disabled", "enabled", "busy-poll"} {
		v, err := ParseThreaded(s)
		if err != nil || v != Threaded(i) || v.String() != s {
			t.Errorf("ParseThreaded(%q) = %v, %v", s, v, err)
		}
		var u Threaded
		if err := u.UnmarshalText([]byte(s)); err != nil || u != Threaded(i) {
			t.Errorf("UnmarshalText(%q) = %v, %v", s, u, err)
		}
	}
	if _, err := ParseThreaded("on"); err == nil {
		t.Error(`ParseThreaded("on") succeeded`)
	}
	if s := Threaded(7).String(); s != "threaded(7)" {
		t.Errorf("Threaded(7) = %q", s)
	}
}

func TestFeatureErrors(t *testing.T) {
	c := &Client{kernel: "6.18.44-test", feat: Features{NAPIGet: true, NAPISet: true, Threaded: true}}
	err := c.check(Attrs{Threaded: new(ThreadedBusyPoll)})
	const want = "threaded NAPI busy polling (threaded busy-poll) needs Linux 6.19 or later; this kernel is 6.18.44-test"
	if err == nil || err.Error() != want {
		t.Fatalf("busy-poll on 6.18: %v, want %q", err, want)
	}
	var fe *FeatureError
	if !errors.As(err, &fe) || fe.Since != "6.19" || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("busy-poll error %#v is not a FeatureError matching ErrUnsupported", err)
	}
	for _, a := range []Attrs{{Threaded: new(ThreadedEnabled)}, {DeferHardIRQs: new(uint32(1))}, {}} {
		if err := c.check(a); err != nil {
			t.Errorf("check(%+v) on 6.18: %v", a, err)
		}
	}
	if err := c.check(Attrs{Threaded: new(Threaded(3))}); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("threaded 3: %v", err)
	}

	old := &Client{kernel: "6.16.1", feat: Features{NAPIGet: true, NAPISet: true}}
	if err := old.check(Attrs{Threaded: new(ThreadedEnabled)}); err == nil || !strings.Contains(err.Error(), "needs Linux 6.17 or later; this kernel is 6.16.1") {
		t.Errorf("threaded on 6.16: %v", err)
	}
	if err := old.check(Attrs{GROFlushTimeout: new(time.Duration(0))}); err != nil {
		t.Errorf("gro-flush-timeout on 6.16: %v", err)
	}
	older := &Client{kernel: "6.12.9", feat: Features{NAPIGet: true}}
	if err := older.check(Attrs{DeferHardIRQs: new(uint32(1))}); err == nil || !strings.Contains(err.Error(), "needs Linux 6.13") {
		t.Errorf("napi-set on 6.12: %v", err)
	}
	oldest := &Client{kernel: "6.8.0"}
	if _, err := oldest.List(0); err == nil || !strings.Contains(err.Error(), "needs Linux 6.9") || strings.Contains(err.Error(), "\n") {
		t.Errorf("napi-get on 6.8: %v", err)
	}
}

func FuzzParseNAPI(f *testing.F) {
	for _, m := range recorded(f, "napi_get_dump.hex") {
		f.Add(m.Data)
	}
	for _, m := range recorded(f, "queue_get_dump.hex") {
		f.Add(m.Data)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Must not panic; whatever decodes must be self-consistent.
		if n, err := parseNAPI(b); err == nil && n.ID == 0 {
			t.Errorf("NAPI without id accepted: %+v", n)
		}
		parseQueue(b)
		parsePolicy([]genetlink.Message{{Data: b}}, cmdNAPISet)
	})
}
