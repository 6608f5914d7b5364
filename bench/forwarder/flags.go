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
// flags of levers added since (Options.GROWindow, Options.TAPIO). The
// hidden A/B flags (hiddenFlags), which the help leaves out, are there
// when the binary takes them before -h.
func Supported(ctx context.Context, exe string) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The help goes to stderr and exits 0; CombinedOutput takes either.
	out, err := exec.CommandContext(ctx, exe, "run", "-h").CombinedOutput()
	flags := parseHelp(string(out))
	if len(flags) == 0 {
		return nil, fmt.Errorf("reading the flags of %s run -h: none listed (%v)", exe, err)
	}
	// An unknown flag before -h is refused (exit 2); known ones lead to
	// the help (exit 0).
	probe := []string{"run"}
	for _, f := range hiddenFlags {
		probe = append(probe, "--"+f[0]+"="+f[1])
	}
	if exec.CommandContext(ctx, exe, append(probe, "-h")...).Run() == nil {
		for _, f := range hiddenFlags {
			flags[f[0]] = true
		}
	}
	return flags, nil
}

// hiddenFlags are the flags of `tapfwd run` its help does not list (the
// in-run A/B mode's), each with a value it takes.
var hiddenFlags = [][2]string{{"ab-control", "/dev/null"}, {"ab-napi", "off,on"}, {"ab-delay", "10us"}}

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
