package forwarder

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"

	"github.com/tapfwd/tapfwd/napi"
)

// Supported are the flags of `tapfwd run` in the binary exe, from its
// help (`tapfwd run -h`, which lists one "  --name" line per flag): what
// a configuration can ask of that build. An older binary lacks the
// flags of levers added since (Options.GROWindow, Options.TAPIO). The
// hidden flags (the A/B mode's: runFlag.probe), which the help leaves
// out, are there when the binary takes them before -h.
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
	for _, f := range runFlags {
		if f.probe != "" {
			probe = append(probe, "--"+f.name+"="+f.probe)
		}
	}
	if exec.CommandContext(ctx, exe, append(probe, "-h")...).Run() == nil {
		for _, f := range runFlags {
			if f.probe != "" {
				flags[f.name] = true
			}
		}
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

// runFlag is one `tapfwd run` flag an Options gives: its name, its value
// for an Options and whether that Options gives it at all (the zero value
// of a field leaves tapfwd's default), how it is written, and, for a flag
// the help does not list, a value it takes (Supported probes the binary
// with it).
type runFlag struct {
	name  string
	value func(o Options) (string, bool)
	form  form
	probe string
}

// form is how a flag is written on the command line.
type form int

const (
	separate form = iota // --name VALUE
	bare                 // --name: a boolean set
	joined               // --name=VALUE: a boolean cleared (--gro=false)
)

// runFlags are the flags Options give, in the order Args writes them: the
// one place the bench names tapfwd's flags.
var runFlags = []runFlag{
	{name: "queues", value: func(o Options) (string, bool) { return strconv.Itoa(o.Queues), o.Queues > 0 }},
	{name: "napi", value: func(o Options) (string, bool) { return string(o.NAPI), o.NAPI != "" }},
	{name: "vnet-hdr", value: func(o Options) (string, bool) { return string(o.VnetHdr), o.VnetHdr != "" }},
	{name: "poll", value: func(o Options) (string, bool) { return string(o.Poll), o.Poll != "" }},
	{name: "nic-backend", value: func(o Options) (string, bool) { return string(o.NICBackend), o.NICBackend != "" }},
	{name: "nic-gro", value: func(o Options) (string, bool) { return string(o.NICGRO), o.NICGRO != "" }},
	{name: "tap-napi-threaded", value: func(o Options) (string, bool) { return "", o.TAPNAPIThreaded }, form: bare},
	{name: "tap-napi-cpu", value: func(o Options) (string, bool) { return cpu(o.TAPNAPICPU) }},
	{name: "tap-gro-flush-timeout", value: func(o Options) (string, bool) { return Micros(o.TAPGROFlushTimeout), o.TAPGROFlushTimeout > 0 }},
	{name: "tap-napi-defer-hard-irqs", value: func(o Options) (string, bool) {
		return strconv.Itoa(o.TAPNAPIDeferHardIRQs), o.TAPNAPIDeferHardIRQs > 0
	}},
	{name: "nic-napi-threaded", value: func(o Options) (string, bool) {
		return o.NICNAPIThreaded.String(), o.NICNAPIThreaded != napi.ThreadedDisabled
	}},
	{name: "nic-napi-cpu", value: func(o Options) (string, bool) { return cpu(o.NICNAPICPU) }},
	{name: "busy-poll-cpu", value: func(o Options) (string, bool) { return cpu(o.BusyPollCPU) }},
	{name: "gro", value: func(o Options) (string, bool) { return "false", o.NoGRO }, form: joined},
	{name: "gro-window", value: func(o Options) (string, bool) { return Micros(o.GROWindow), o.GROWindow > 0 }},
	{name: "batch", value: func(o Options) (string, bool) { return strconv.Itoa(o.Batch), o.Batch > 0 }},
	{name: "cpus", value: func(o Options) (string, bool) { return o.CPUs, o.CPUs != "" }},
	{name: "spin", value: func(o Options) (string, bool) { return Micros(o.Spin), o.Spin > 0 }},
	{name: "split-directions", value: func(o Options) (string, bool) { return "", o.Split }, form: bare},
	{name: "follow-load", value: func(o Options) (string, bool) { return o.FollowLoad, o.FollowLoad != "" }, form: joined},
	{name: "tap-io", value: func(o Options) (string, bool) { return o.TAPIO, o.TAPIO != "" }},
	{name: "metrics-addr", value: func(o Options) (string, bool) { return MetricsAddr, o.PProf }},
	{name: "pprof", value: func(o Options) (string, bool) { return "", o.PProf }, form: bare},
	{name: "ab-control", value: func(o Options) (string, bool) { return o.ABControl, o.ABControl != "" }, probe: "/dev/null"},
	{name: "ab-napi", value: func(o Options) (string, bool) {
		return string(o.ABNAPI[0]) + "," + string(o.ABNAPI[1]), o.ABNAPI != [2]Switch{}
	}, probe: "off,on"},
	{name: "ab-delay", value: func(o Options) (string, bool) { return Micros(o.ABDelay), o.ABDelay > 0 }, probe: "10us"},
}

// cpu writes a CPU setting, given when it names one.
func cpu(n *int) (string, bool) {
	if n == nil {
		return "", false
	}
	return strconv.Itoa(*n), true
}

// Args are the `tapfwd run` flags for o, in a fixed order (runFlags'),
// without the ones a bed decides (--nic, --tap, --tap-netns, --tap-addr).
func (o Options) Args() []string {
	var a []string
	for _, f := range runFlags {
		v, ok := f.value(o)
		switch {
		case !ok:
		case f.form == bare:
			a = append(a, "--"+f.name)
		case f.form == joined:
			a = append(a, "--"+f.name+"="+v)
		case f.form == separate:
			a = append(a, "--"+f.name, v)
		}
	}
	return a
}

// Flags are the names of the flags Args gives, without the dashes.
func (o Options) Flags() []string {
	var names []string
	for _, f := range runFlags {
		if _, ok := f.value(o); ok {
			names = append(names, f.name)
		}
	}
	return names
}
