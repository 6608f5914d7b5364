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

// subcommands are tapfwd's user-visible subcommands, in the order of
// the reference page (the keepers' hidden ones are not).
var subcommands = []string{"run", "features", "napi list", "napi set", "vm-port add", "vm-port list", "vm-port del",
	"down", "status", "version"}

// TestReference: docs/reference/flags.md's tapfwd section is every
// subcommand's flag set as the code makes it. Each subcommand is asked
// for its --help, which returns at its flag parse before it does
// anything, and cliflag.Record hands over the flag set it made.
// TAPFWD_REFERENCE=update (make reference) writes the section.
func TestReference(t *testing.T) {
	checkListed(t, usage, napiUsage, vmPortUsage)
	var sets []cliflag.Made
	for _, cmd := range subcommands {
		var made []cliflag.Made
		stop := cliflag.Record(func(m cliflag.Made) { made = append(made, m) })
		code := run(append(strings.Fields(cmd), "--help"), io.Discard, io.Discard)
		stop()
		if code != 0 || len(made) != 1 || made[0].Name != cmd {
			t.Fatalf("tapfwd %s --help: exit %d, flag sets %+v; want 0 and the one of %q", cmd, code, made, cmd)
		}
		sets = append(sets, made[0])
	}
	if err := refdoc.FlagsPage.Check("tapfwd", refdoc.FlagsSection("tapfwd", sets)); err != nil {
		t.Fatal(err)
	}
}

// checkListed: every subcommand the usage texts list is in subcommands.
func checkListed(t *testing.T, top, napi, vmPort string) {
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^  tapfwd ([a-z-]+)(?: ([a-z|]+))?`).FindAllStringSubmatch(top, -1) {
		if m[2] == "" {
			listed = append(listed, m[1])
		}
		for _, sub := range strings.Split(m[2], "|") {
			if sub != "" {
				listed = append(listed, m[1]+" "+sub)
			}
		}
	}
	for prefix, text := range map[string]string{"napi ": napi, "vm-port ": vmPort} {
		for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+)  `).FindAllStringSubmatch(text, -1) {
			listed = append(listed, prefix+m[1])
		}
	}
	for _, cmd := range listed {
		if !slices.Contains(subcommands, cmd) {
			t.Errorf("the usage lists tapfwd %s, missing from subcommands (and docs/reference/flags.md)", cmd)
		}
	}
	if len(listed) < len(subcommands) {
		t.Errorf("the usage lists %q, fewer than subcommands %q", listed, subcommands)
	}
}
