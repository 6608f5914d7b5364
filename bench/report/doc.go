// Package report is the benches' one report model (header, host, method,
// configurations, comparisons) and its one set of renderers: text,
// Markdown, JSON, CSV and charts. Each experiment adds its own rows and cells.
package report
