package forwardtest

import (
	"testing"
	"time"
)

// WaitFor waits up to 5 s for ok, asking every millisecond: a worker
// moves frames over the stand-ins on its own goroutine, so what it did
// shows after a while.
func WaitFor(t testing.TB, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
	}
}
