package forwarder

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"time"
)

// Supported are the flags of `tapfwd run` in the binary exe, from its
// help (`tapfwd run -h`, which lists one "  --name" line per flag): what
// a configuration can ask of that build. An older binary lacks the
// flags of levers added since (Options.GROWindow, Options.TAPIO).
func Supported(ctx context.Context, exe string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The help goes to stderr and exits 0; CombinedOutput takes either.
	out, err := exec.CommandContext(ctx, exe, "run", "-h").CombinedOutput()
	flags := parseHelp(string(out))
	if len(flags) == 0 {
		return nil, fmt.Errorf("reading the flags of %s run -h: none listed (%v)", exe, err)
	}
	return flags, nil
}

var helpFlag = regexp.MustCompile(`(?m)^\s+--([a-z0-9][a-z0-9-]*)\b`)

// parseHelp is the flag names a help text lists.
func parseHelp(text string) map[string]bool {
	flags := map[string]bool{}
	for _, m := range helpFlag.FindAllStringSubmatch(text, -1) {
		flags[m[1]] = true
	}
	return flags
}

// Missing are the flags o gives (Flags) that flags, a binary's
// Supported set, lacks; none when flags is nil (not checked).
func (o Options) Missing(flags map[string]bool) []string {
	if flags == nil {
		return nil
	}
	var out []string
	for _, f := range o.Flags() {
		if !flags[f] {
			out = append(out, "--"+f)
		}
	}
	return out
}
