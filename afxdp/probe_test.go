package afxdp

import "testing"

// TestProbe: on a veth under this kernel AF_XDP binds in copy mode with
// need_wakeup, multi-buffer and TX metadata, and never in zero-copy.
func TestProbe(t *testing.T) {
	b := newBed(t, 1500)
	var f Features
	b.Do(b.FwdNS, func() error { f = Probe(b.NIC); return nil })
	t.Logf("%+v", f)
	want := Features{XDPSockets: true, NeedWakeup: true, MultiBuffer: true, TxMetadata: true, Copy: true, Device: b.NIC}
	f.Err = ""
	if f != want {
		t.Errorf("Probe(%s) = %+v, want %+v", b.NIC, f, want)
	}
	if f := Probe("nosuchdev0"); f.Err == "" || f.XDPSockets {
		t.Errorf("Probe of a missing device: %+v, want an error", f)
	}
}
