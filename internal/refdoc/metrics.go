package refdoc

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric is one metric family /metrics exports.
type Metric struct {
	Name, Help string
	Type       string   // counter, gauge, histogram, summary, untyped
	Labels     []string // the variable labels, in the descriptor's order
	// ConstLabels are the constant labels' names (their values, such as
	// go_info's Go version, are the build's).
	ConstLabels []string
}

var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

var constRE = regexp.MustCompile(`(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// FromDesc reads a descriptor's name, help and labels (client_golang
// shows them only in its String); the type is not in a descriptor.
func FromDesc(d *prometheus.Desc) (Metric, error) {
	m := descRE.FindStringSubmatch(d.String())
	if m == nil {
		return Metric{}, fmt.Errorf("refdoc: cannot read the descriptor %s", d)
	}
	name, err1 := strconv.Unquote(m[1])
	help, err2 := strconv.Unquote(m[2])
	if err1 != nil || err2 != nil {
		return Metric{}, fmt.Errorf("refdoc: cannot read the descriptor %s", d)
	}
	var labels []string
	for _, l := range strings.Split(m[4], ",") {
		if l != "" {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
	}
	var consts []string
	for _, c := range constRE.FindAllStringSubmatch(m[3], -1) {
		consts = append(consts, c[1])
	}
	return Metric{Name: name, Help: help, Labels: labels, ConstLabels: consts}, nil
}

// MetricsPage renders docs/reference/metrics.md: tapfwd's own metrics
// (own) and the Go runtime's and the process's (runtime) that its
// registry adds, each sorted by name.
func MetricsPage(own, runtime []Metric) []byte {
	var b strings.Builder
	b.WriteString(`# Metrics

Every metric family tapfwd serves at ` + "`/metrics`" + ` on ` + "`--metrics-addr`" + `
(default 127.0.0.1:9310), from the descriptors of the collectors its
registry holds (` + "`metrics.NewRegistry`" + `), with the type each is
collected as. ` + "`make reference`" + ` writes this page: do not edit it, a test
fails when it is not what the code says. A family has series only where
its part is in use (VM ports, vhost-user, AF_XDP, GRO, ...), as its help
says. Each series of a ` + "`histogram`" + ` is ` + "`NAME_bucket`" + ` (with ` + "`le`" + `),
` + "`NAME_sum`" + ` and ` + "`NAME_count`" + `.

## tapfwd's
`)
	writeMetrics(&b, own)
	b.WriteString(`
## The Go runtime's and the process's

The standard collectors of client_golang (` + "`collectors.NewGoCollector`" + `,
` + "`collectors.NewProcessCollector`" + `): their names and help are client_golang's
and the Go runtime's.
`)
	writeMetrics(&b, runtime)
	return []byte(b.String())
}

func writeMetrics(b *strings.Builder, ms []Metric) {
	ms = append([]Metric(nil), ms...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	b.WriteString("\n| metric | type | labels | help |\n|---|---|---|---|\n")
	for _, m := range ms {
		var labels []string
		for _, l := range m.Labels {
			labels = append(labels, "`"+l+"`")
		}
		for _, l := range m.ConstLabels {
			labels = append(labels, "`"+l+"` (constant)")
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, strings.Join(labels, ", "), cell(m.Help))
	}
}
