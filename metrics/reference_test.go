package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tapfwd/tapfwd/internal/refdoc"
)

// TestReference: docs/reference/metrics.md is every metric family the
// registry tapfwd serves describes (its collector's, the Go runtime's and
// the process's), each with the type it is collected as (from a gather of
// every option's series: a descriptor has no type).
// TAPFWD_REFERENCE=update (make reference) writes the page.
func TestReference(t *testing.T) {
	mfs, src := gatherAll(t)
	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	var own, runtime []refdoc.Metric
	for i, c := range registered(NewCollector(src)) {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := refdoc.FromDesc(d)
			if err != nil {
				t.Fatal(err)
			}
			if m.Type = types[m.Name]; m.Type == "" {
				t.Errorf("%s is described but was not collected: no type for the page", m.Name)
			}
			if i == 0 {
				own = append(own, m)
			} else {
				runtime = append(runtime, m)
			}
		}
	}
	if len(own) < 20 || len(runtime) < 5 {
		t.Fatalf("%d of tapfwd's metrics and %d others described", len(own), len(runtime))
	}
	if err := refdoc.Check("metrics.md", refdoc.MetricsPage(own, runtime)); err != nil {
		t.Fatal(err)
	}
}
