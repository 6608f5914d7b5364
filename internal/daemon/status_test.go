package daemon

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tapfwd/tapfwd/internal/tapport"
)

// TestFetchStatus reads a daemon's /status, and refuses what is not one.
func TestFetchStatus(t *testing.T) {
	body := `{"schema":"` + StatusSchema + `","tap":{"name":"lab0"},"nic":"w1"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/status":
			w.Write([]byte(body))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	st, raw, err := FetchStatus(addr)
	if err != nil || st.TAP.Name != "lab0" || st.NIC != "w1" || string(raw) != body {
		t.Errorf("FetchStatus: %+v, %q, %v", st, raw, err)
	}
	// This process answered itself.
	if by := st.AnsweredBy; by == nil || by.Addr.String() != addr || len(by.Procs) != 1 || by.Procs[0].Pid != os.Getpid() {
		t.Errorf("answered by %v, want pid %d at %s", by, os.Getpid(), addr)
	}
	body = `{"schema":"` + StatusSchema + `"}`
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusTeapot)
	})
	if _, _, err := FetchStatus(addr); err == nil || !strings.Contains(err.Error(), "answers 418 I'm a teapot: not a tapfwd, or one older than /status; answered at "+addr+" by pid ") {
		t.Errorf("a 418: %v", err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(body)) })
	body = `{"schema":"something/2"}`
	if _, _, err := FetchStatus(addr); err == nil || !strings.Contains(err.Error(), `is not a tapfwd status of schema `+StatusSchema+` (it has "something/2")`) {
		t.Errorf("another schema: %v", err)
	}
	body = "not json"
	if _, _, err := FetchStatus(addr); err == nil || !strings.Contains(err.Error(), `(it has "")`) {
		t.Errorf("not JSON: %v", err)
	}
	srv.Close()
	_, _, err = FetchStatus(addr)
	if !errors.Is(err, ErrNoStatus) || err.Error() != "no tapfwd answers at "+addr+": connect: connection refused" {
		t.Errorf("nothing listening: %v, want ErrNoStatus and the refusal alone", err)
	}
}

// TestStatusText: tapfwd status's text has the TAP's settings, a row per
// queue and direction with its drops (the kernel's ring drops first on
// the way in), and each VM port with what attaches a guest to it.
func TestStatusText(t *testing.T) {
	st := sampleStatus()
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		", up 1m1s\n",
		"answered at 127.0.0.1:9310 by pid 42 (tapfwd, user nobody)\n",
		"TAP lab0 in network namespace lab: MAC 02:00:00:00:00:01, MTU 1500, napi on, vnet-hdr on, multi-queue off, offloads csum,tso4; persistent (attached to the TAP an earlier run left)\n",
		"NIC w1 (packet, fanout)\n",
		"DROPS (rates over the last 5 s)",
		"nic->tap   20        10.0    100       98    kernel_ring=3 oversize=2\n",
		"tap->nic   0         0.0     7         7     none\n",
		"  tfwvm0  02:00:00:00:00:10  /dev/tapfwd/lab:tfwvm0\n",
		"  vhost0  02:00:00:00:00:11  vhost-user /run/tapfwd/vhost0.sock  running\n",
		"    from the guest: 5 frames, drops spoofed_mac=1; to it: 4 frames, drops none\n",
		"    features: mrg_rxbuf,csum\n",
		"    libvirt: <interface>\n             </interface>\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status text lacks %q:\n%s", want, out)
		}
	}
	// One of a thing is "1 frame", not "1 frames" (issue 38, item 7d).
	st.VMPorts[1].FromGuest.RxPackets, st.VMPorts[1].ToGuest.TxPackets = 1, 0
	b.Reset()
	st.WriteText(&b)
	if want := "    from the guest: 1 frame, drops spoofed_mac=1; to it: 0 frames, drops none\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status text lacks %q:\n%s", want, b.String())
	}
	st.AnsweredBy = &Answerer{Addr: netip.MustParseAddrPort("127.0.0.1:9310"), Unknown: "why"}
	b.Reset()
	st.WriteText(&b)
	if want := "answered at 127.0.0.1:9310 by a process not known: why\n"; !strings.Contains(b.String(), want) {
		t.Errorf("status text lacks %q:\n%s", want, b.String())
	}
}

// TestStatusTextVMPorts: tapfwd status lists every macvtap on the TAP,
// saying which were added after the start, and says when it could list
// only this run's.
func TestStatusTextVMPorts(t *testing.T) {
	st := &Status{TAP: TAPStatus{Name: "lab0"}, VMPorts: []PortStatus{
		{Name: "tfwvm0", MAC: "02:00:00:00:00:10", Dev: "/dev/tapfwd/lab:tfwvm0", Type: "macvtap", Origin: OriginRun},
		{Name: "tfwvm1", MAC: "02:00:00:00:00:12", Dev: "/dev/tapfwd/lab:tfwvm1", Type: "macvtap", Origin: OriginAdded},
		{Name: "macvtap0", MAC: "02:00:00:00:00:13", Type: "macvtap", Origin: OriginAdded}}}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "\nVM ports:\n" +
		"  tfwvm0  02:00:00:00:00:10  /dev/tapfwd/lab:tfwvm0\n" +
		"  tfwvm1  02:00:00:00:00:12  /dev/tapfwd/lab:tfwvm1  added after the start\n" +
		"  macvtap0  02:00:00:00:00:13  (no device node)  added after the start\n"
	if out := b.String(); !strings.HasSuffix(out, want) {
		t.Errorf("status text ends\n%s\nwant it to end\n%s", out, want)
	}
	st.VMPorts, st.VMPortsError = st.VMPorts[:1], "netns: boom"
	b.Reset()
	st.WriteText(&b)
	want = "\nVM ports:\n  (only those this run made: the TAP's could not be listed: netns: boom)\n  tfwvm0  02:00:00:00:00:10  /dev/tapfwd/lab:tfwvm0\n"
	if out := b.String(); !strings.HasSuffix(out, want) {
		t.Errorf("with a listing error, status text ends\n%s\nwant it to end\n%s", out, want)
	}
}

// TestMacvtapStatus: /status's macvtaps are those found on the TAP, "run"
// the ones this run made (same name and ifindex), "added" the others; the
// run's own when the TAP's cannot be listed.
func TestMacvtapStatus(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, b} }
	d := &Daemon{ports: vmPorts{macvtaps: []tapport.Port{{Name: "tfwvm0", Index: 10, MAC: mac(1), Dev: "/dev/tapfwd/lab:tfwvm0"},
		{Name: "tfwvm1", Index: 11, MAC: mac(2)}}}}
	found := []tapport.Port{{Name: "tfwvm0", Index: 10, MAC: mac(1), Dev: "/dev/tapfwd/lab:tfwvm0"},
		{Name: "tfwvm1", Index: 21, MAC: mac(3)}, {Name: "tfwvm7", Index: 22, MAC: mac(4), Dev: "/dev/tapfwd/lab:tfwvm7"}}
	text := func(ps []PortStatus) string {
		var parts []string
		for _, p := range ps {
			parts = append(parts, p.Name+" "+p.MAC+" "+p.Dev+" "+p.Type+" "+p.Origin)
		}
		return strings.Join(parts, "; ")
	}
	ps, errText := d.macvtapStatus(func() ([]tapport.Port, error) { return found, nil })
	want := "tfwvm0 02:00:00:00:00:01 /dev/tapfwd/lab:tfwvm0 macvtap run; tfwvm1 02:00:00:00:00:03  macvtap added; tfwvm7 02:00:00:00:00:04 /dev/tapfwd/lab:tfwvm7 macvtap added"
	if got := text(ps); got != want || errText != "" {
		t.Errorf("listed: %q, %q\nwant %q", got, errText, want)
	}
	ours := "tfwvm0 02:00:00:00:00:01 /dev/tapfwd/lab:tfwvm0 macvtap run; tfwvm1 02:00:00:00:00:02  macvtap run"
	ps, errText = d.macvtapStatus(func() ([]tapport.Port, error) { return nil, errors.New("boom") })
	if got := text(ps); got != ours || errText != "boom" {
		t.Errorf("listing failed: %q, %q; want %q, boom", got, errText, ours)
	}
	if ps, errText = d.macvtapStatus(nil); text(ps) != ours || errText != "" {
		t.Errorf("no lister: %q, %q; want %q", text(ps), errText, ours)
	}
	if ps, _ := (&Daemon{}).macvtapStatus(nil); ps == nil {
		t.Error("no ports: nil, want [] (vm_ports is a JSON array)")
	}
}

// sampleStatus is a Status with a queue, a macvtap port and a vhost-user
// port, answered by a process known.
func sampleStatus() *Status {
	return &Status{UptimeSeconds: 61.4, NIC: "w1 (packet, fanout)", RateSeconds: 5,
		TAP: TAPStatus{Name: "lab0", Netns: "lab", MAC: "02:00:00:00:00:01", MTU: 1500, NAPI: true, VnetHdr: true, Offloads: "csum,tso4", Persistent: true, Attached: true},
		Queues: []QueueStatus{{ID: 0, CPU: 1, KernelDrops: 3,
			NICToTAP: DirStatus{RxPackets: 100, TxPackets: 98, RxPacketsPerSecond: 20, RxBytesPerSecond: 1.25e6, Drops: map[string]uint64{"oversize": 2, "bad_vnet_hdr": 0}},
			TAPToNIC: DirStatus{RxPackets: 7, TxPackets: 7}}},
		VMPorts: []PortStatus{{Name: "tfwvm0", MAC: "02:00:00:00:00:10", Dev: "/dev/tapfwd/lab:tfwvm0"},
			{Name: "vhost0", MAC: "02:00:00:00:00:11", Type: "vhost-user", Socket: "/run/tapfwd/vhost0.sock", State: "running",
				FromGuest: &DirStatus{RxPackets: 5, Drops: map[string]uint64{"spoofed_mac": 1}}, ToGuest: &DirStatus{TxPackets: 4},
				Features: []string{"mrg_rxbuf", "csum"}, QEMU: "-netdev vhost-user", Libvirt: "<interface>\n</interface>", LibvirtMemory: "<memoryBacking/>"}},
		AnsweredBy: &Answerer{Addr: netip.MustParseAddrPort("127.0.0.1:9310"), Procs: []AnswerProc{{Pid: 42, Comm: "tapfwd", User: "nobody"}}},
	}
}

// hostileStrings are what a process that is not tapfwd, serving /status
// at the metrics address while tapfwd is down, could put in its strings.
var hostileStrings = []struct{ name, s string }{
	{"CSI colour", "red\x1b[31mtext\x1b[0m"},
	{"CSI clear screen", "\x1b[2J\x1b[H"},
	{"OSC title, BEL", "\x1b]0;owned\x07"},
	{"OSC 52 clipboard, ST", "\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\"},
	{"OSC 8 hyperlink", "\x1b]8;;http://198.18.0.1/\x1b\\click\x1b]8;;\x1b\\"},
	{"DCS", "\x1bP+q544e\x1b\\"},
	{"C1 CSI and OSC as UTF-8", "\u009b31m\u009d0;t\u009c"},
	{"C1 as raw bytes", "\x9b31m\x9d0;t\x9c"},
	{"DEL, BS, CR", "abc\x7f\x08\x08\rxyz"},
	{"NUL, TAB, VT, FF", "a\x00b\tc\vd\fe"},
	{"forged QEMU line", "x\n    QEMU:    -netdev socket,connect=198.18.0.1:1\n"},
	{"bidi override", "safe\u202eevil\u202c"},
}

// TestStatusTextHostile (issue 35): whatever a /status holds in any of its
// strings, tapfwd status prints only printable text and the newlines of
// its own layout: no escape sequence, no control, no line the server
// added.
func TestStatusTextHostile(t *testing.T) {
	layout := func(s string) (out string, lines, qemu int) {
		st := sampleStatus()
		fillStrings(reflect.ValueOf(st).Elem(), s)
		for i, p := range sampleStatus().VMPorts {
			st.VMPorts[i].Type = p.Type // compared, not printed
		}
		var b strings.Builder
		if err := st.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		for l := range strings.Lines(b.String()) {
			// A libvirt snippet's own lines, indented under it.
			if !strings.HasPrefix(l, "             ") {
				lines++
			}
			if strings.HasPrefix(l, "    QEMU:") {
				qemu++
			}
		}
		return b.String(), lines, qemu
	}
	plain, want, _ := layout("ZZ")
	if n := strings.Count(plain, "ZZ"); n < 20 {
		t.Fatalf("only %d strings printed were filled:\n%s", n, plain)
	}
	for _, h := range hostileStrings {
		out, lines, qemu := layout(h.s)
		bad := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) })
		switch {
		case !utf8.ValidString(out):
			t.Errorf("%s: the text is not UTF-8:\n%q", h.name, out)
		case bad >= 0:
			t.Errorf("%s: %q at byte %d:\n%q", h.name, out[bad:min(bad+8, len(out))], bad, out)
		case lines != want || qemu != 1:
			t.Errorf("%s: %d lines (want %d), %d QEMU lines (want 1):\n%s", h.name, lines, want, qemu, out)
		}
	}
}

// fillStrings puts s before every exported string in v: fields, slice
// elements, pointers' targets and map keys.
func fillStrings(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s + v.String())
	case reflect.Pointer:
		if !v.IsNil() {
			fillStrings(v.Elem(), s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i), s)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			fillStrings(v.Index(i), s)
		}
	case reflect.Map:
		if v.Type().Key().Kind() == reflect.String {
			m := reflect.MakeMap(v.Type())
			for _, k := range v.MapKeys() {
				m.SetMapIndex(reflect.ValueOf(s+k.String()), v.MapIndex(k))
			}
			v.Set(m)
		}
	}
}

// TestPrintable keeps plain text as it is.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain: lab0 /run/tapfwd/x.sock <interface type='vhostuser'/> é ü 漢": "plain: lab0 /run/tapfwd/x.sock <interface type='vhostuser'/> é ü 漢",
		"a\tb\nc\u00a0d":     "a b c d",
		"\x1b[1mbold\x1b[0m": "[1mbold[0m",
		"x\xffy":             "x\ufffdy",
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
