package traffic

import (
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// Blast makes frames calls of send (which writes one frame and returns the
// write's error) in rounds rounds, with an echo request from p sent in the
// middle of each round: after each round the ping must be answered (a
// request sent in the middle of the burst may be lost with it, so two more
// are allowed) and fw must still be running. It returns how many writes
// succeeded, how many failed by error text, and how many extra pings
// it took.
func Blast(t testing.TB, p *Pinger, fw *testbed.Process, frames, rounds int, send func() error) (sent int, refused map[string]int, retries int) {
	t.Helper()
	refused = map[string]int{}
	for r := 0; r < rounds; r++ {
		for i := 0; sent < (r+1)*frames/rounds; i++ {
			if i == frames/rounds/2 {
				p.Send()
			}
			if err := send(); err != nil {
				refused[err.Error()]++
				continue
			}
			sent++
		}
		n, ok := p.Answered(time.Second)
		if !ok {
			t.Fatalf("round %d: no ping reply (3 requests, 1 s each); tapfwd exited: %v\n%s", r, fw.Exited(), fw.Output())
		}
		retries += n
		if fw.Exited() {
			t.Fatalf("tapfwd exited after round %d:\n%s", r, fw.Output())
		}
	}
	return sent, refused, retries
}
