package main

import (
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag"
	"github.com/tapfwd/tapfwd/internal/refdoc"
)

// subcommands are tapfwd-bench's user-visible subcommands, in the order
// of the reference page (the naive forwarder it starts itself is not).
var subcommands = []string{"napi", "throughput", "latency", "profile", "compare", "version"}

// TestReference: docs/reference/flags.md's tapfwd-bench section is every
// subcommand's flag set as the code makes it. Each subcommand is asked
// for its --help, which returns at its flag parse before it does
// anything, and cliflag.Record hands over the flag set it made.
// TAPFWD_REFERENCE=update (make reference) writes the section.
func TestReference(t *testing.T) {
	for _, m := range regexp.MustCompile(`tapfwd-bench ([a-z|]+)`).FindAllStringSubmatch(usage, -1) {
		for _, cmd := range strings.Split(m[1], "|") {
			if !slices.Contains(subcommands, cmd) {
				t.Errorf("the usage lists tapfwd-bench %s, missing from subcommands (and docs/reference/flags.md)", cmd)
			}
		}
	}
	var sets []cliflag.Made
	for _, cmd := range subcommands {
		var made []cliflag.Made
		stop := cliflag.Record(func(m cliflag.Made) { made = append(made, m) })
		code := run([]string{cmd, "--help"}, io.Discard, io.Discard)
		stop()
		if code != 0 || len(made) != 1 || made[0].Name != cmd {
			t.Fatalf("tapfwd-bench %s --help: exit %d, flag sets %+v; want 0 and the one of %q", cmd, code, made, cmd)
		}
		sets = append(sets, made[0])
	}
	if err := refdoc.FlagsPage.Check("tapfwd-bench", refdoc.FlagsSection("tapfwd-bench", sets)); err != nil {
		t.Fatal(err)
	}
}
