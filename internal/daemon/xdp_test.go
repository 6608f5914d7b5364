package daemon

import (
	"slices"
	"testing"

	"github.com/tapfwd/tapfwd/napi"
)

// TestPolledNAPIs: the NAPI instances tuneNAPIs defers and the CPU poller
// polls are those the queues' pollers poll: with fewer queues than
// instances, not the others.
func TestPolledNAPIs(t *testing.T) {
	list := []napi.NAPI{{ID: 9}, {ID: 7}, {ID: 8}}
	for _, tc := range []struct {
		queues int
		want   []uint32
	}{
		{1, []uint32{7}},
		{2, []uint32{7, 8}},
		{3, []uint32{7, 8, 9}},
		{4, []uint32{7, 8, 9}}, // more queues than instances: each polls them all
	} {
		if got := polledNAPIs(queueNAPIs(list, tc.queues)); !slices.Equal(got, tc.want) {
			t.Errorf("%d queues on instances 9, 7, 8: polled %v, want %v", tc.queues, got, tc.want)
		}
	}
}
