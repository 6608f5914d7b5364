// Package throughputview lays a saved or fresh throughput report out
// for reading: the text and Markdown tables, the CSV and the charts.
package throughputview

import (
	"github.com/tapfwd/tapfwd/bench/report"
	"github.com/tapfwd/tapfwd/bench/throughput"
)

// Report is a throughput report with its renderings. It embeds the
// report, so its JSON form (report.WriteJSON, report.Files) is the
// report's own.
type Report struct{ *throughput.Report }

// ran says whether the configuration named name ran.
func (r Report) ran(name string) bool { return report.Ran(r.Configs, name) }
