// Package report is the benches' one report model (header, host, method,
// configurations, comparisons) and its renderers: text, Markdown, JSON, CSV, charts.
package report
