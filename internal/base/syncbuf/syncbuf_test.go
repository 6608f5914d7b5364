package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writers and a reader at once (run with -race); every
// write lands whole.
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	got := b.String()
	if n := strings.Count(got, "ab\n"); n != 400 || len(got) != 1200 {
		t.Errorf("%d whole writes in %d bytes, want 400 in 1200", n, len(got))
	}
}
