package prom

import (
	"sync"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
	"github.com/tapfwd/tapfwd/internal/testkit"
)

// Scraper fetches tapfwd's /metrics page in the background, from the
// start of a test's load to its end (StartScraper, Stop).
type Scraper struct {
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	pages  []string
	failed int
}

// StartScraper scrapes tapfwd in bed's fwd namespace (testkit.MetricsAddr)
// every interval until Stop, or until t ends.
func StartScraper(t testing.TB, bed *testbed.Bed, every time.Duration) *Scraper {
	s := &Scraper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(every):
			}
			code, body, err := testkit.HTTPGet(t, bed, bed.FwdNS, "http://"+testkit.MetricsAddr+"/metrics")
			if err == nil && code == 200 {
				s.pages = append(s.pages, body)
			} else {
				s.failed++
			}
		}
	}()
	t.Cleanup(func() { s.Stop() })
	return s
}

// Stop ends the scrapes and returns the pages fetched and how many
// scrapes failed; it may be called again.
func (s *Scraper) Stop() (pages []string, failed int) {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.pages, s.failed
}
