package netns

import (
	"testing"
	"time"
)

// TestWatchLink: a watch reports its link deleted, or moved to another
// namespace, within a second, and a link that is already gone at once; a
// link that stays is not reported, nor is another link's removal.
func TestWatchLink(t *testing.T) {
	a, b := newNS(t), newNS(t)
	na, nb := open(t, a), open(t, b)
	ip(t, "-n", a, "link", "add", "w0", "type", "veth", "peer", "name", "w1")
	ip(t, "-n", a, "link", "add", "m0", "type", "veth", "peer", "name", "m1")
	index := func(name string) int {
		l, err := na.Link(name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Index
	}
	watch := func(index int) *LinkWatch {
		w, err := na.WatchLink(index)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	wantGone := func(what string, w *LinkWatch, gone bool) {
		t.Helper()
		select {
		case <-w.Gone():
			if !gone {
				t.Errorf("%s: reported gone", what)
			}
		case <-time.After(time.Second):
			if gone {
				t.Errorf("%s: not reported gone within a second", what)
			}
		}
	}
	peer, m0 := index("w1"), index("m0")
	stays, deleted, moved := watch(index("lo")), watch(peer), watch(m0)
	// Deleting w0 takes its peer w1 with it; moving m0 leaves m1 behind.
	ip(t, "-n", a, "link", "del", "w0")
	if err := na.SetLink(m0, LinkChange{Netns: nb}); err != nil {
		t.Fatal(err)
	}
	wantGone("the deleted veth's peer", deleted, true)
	wantGone("the veth moved to another namespace", moved, true)
	wantGone("lo", stays, false)
	wantGone("an index already gone", watch(peer), true)
	if err := stays.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-stays.Gone():
		t.Error("Close reported lo gone")
	default:
	}
}
