package main

import (
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/refdoc"
)

// subcommands are tapfwd-bench's user-visible subcommands, in the order
// of the reference page (the naive forwarder it starts itself is not).
var subcommands = []string{"napi", "throughput", "latency", "profile", "compare", "version"}

// TestReference: docs/reference/flags.md's tapfwd-bench section is every
// subcommand's flag set as the code makes it. Each subcommand is asked
// for its --help, which returns at its flag parse before it does
// anything, and the flag set it made is recorded (refdoc.CheckFlags).
// TAPFWD_REFERENCE=update (make reference) writes the section.
func TestReference(t *testing.T) {
	for _, m := range regexp.MustCompile(`tapfwd-bench ([a-z|]+)`).FindAllStringSubmatch(usage, -1) {
		for _, cmd := range strings.Split(m[1], "|") {
			if !slices.Contains(subcommands, cmd) {
				t.Errorf("the usage lists tapfwd-bench %s, missing from subcommands (and docs/reference/flags.md)", cmd)
			}
		}
	}
	discard := func(args []string) int { return run(args, io.Discard, io.Discard) }
	if err := refdoc.CheckFlags("tapfwd-bench", subcommands, discard); err != nil {
		t.Fatal(err)
	}
}
