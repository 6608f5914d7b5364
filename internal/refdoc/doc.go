// Package refdoc makes the pages of docs/reference from the code and
// keeps them true: the flags of every subcommand from its flag set, the
// metrics from the collector's descriptors, the /status schema from its Go
// types and their doc comments. Each page's test (TestReference in
// cmd/tapfwd, cmd/tapfwd-bench, metrics and internal/daemon) renders it in
// memory and fails when the committed page differs; with
// TAPFWD_REFERENCE=update in its environment (make reference, go
// generate) it writes the page instead. Only tests import refdoc: nothing
// of it is linked into tapfwd.
package refdoc

//go:generate make -C ../.. reference
