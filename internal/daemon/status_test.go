package daemon

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	st := &Status{UptimeSeconds: 61.4, NIC: "w1 (packet, fanout)", RateSeconds: 5,
		TAP: TAPStatus{Name: "lab0", Netns: "lab", MAC: "02:00:00:00:00:01", MTU: 1500, NAPI: true, VnetHdr: true, Offloads: "csum,tso4", Persistent: true, Attached: true},
		Queues: []QueueStatus{{ID: 0, CPU: 1, KernelDrops: 3,
			NICToTAP: DirStatus{RxPackets: 100, TxPackets: 98, RxPacketsPerSecond: 20, RxBytesPerSecond: 1.25e6, Drops: map[string]uint64{"oversize": 2, "bad_vnet_hdr": 0}},
			TAPToNIC: DirStatus{RxPackets: 7, TxPackets: 7}}},
		VMPorts: []PortStatus{{Name: "tfwvm0", MAC: "02:00:00:00:00:10", Dev: "/dev/tapfwd/lab:tfwvm0"},
			{Name: "vhost0", MAC: "02:00:00:00:00:11", Type: "vhost-user", Socket: "/run/tapfwd/vhost0.sock", State: "running",
				FromGuest: &DirStatus{RxPackets: 5, Drops: map[string]uint64{"spoofed_mac": 1}}, ToGuest: &DirStatus{TxPackets: 4},
				Features: []string{"mrg_rxbuf", "csum"}, QEMU: "-netdev vhost-user", Libvirt: "<interface>\n</interface>", LibvirtMemory: "<memoryBacking/>"}},
	}
	var b strings.Builder
	if err := st.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		", up 1m1s\n",
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
}
