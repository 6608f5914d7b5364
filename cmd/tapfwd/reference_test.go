package main

import (
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/refdoc"
)

// subcommands are tapfwd's user-visible subcommands, in the order of
// the reference page (the keepers' hidden ones are not).
var subcommands = []string{"run", "features", "napi list", "napi set", "vm-port add", "vm-port list", "vm-port del",
	"down", "status", "version"}

// TestReference: docs/reference/flags.md's tapfwd section is every
// subcommand's flag set as the code makes it. Each subcommand is asked
// for its --help, which returns at its flag parse before it does
// anything, and the flag set it made is recorded (refdoc.CheckFlags).
// TAPFWD_REFERENCE=update (make reference) writes the section.
func TestReference(t *testing.T) {
	checkListed(t, usage, napiUsage, vmPortUsage)
	discard := func(args []string) int { return run(args, io.Discard, io.Discard) }
	if err := refdoc.CheckFlags("tapfwd", subcommands, discard); err != nil {
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
