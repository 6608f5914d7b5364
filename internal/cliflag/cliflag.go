// Package cliflag is what tapfwd's two commands share on the command line:
// subcommand dispatch, flag parsing with one-line errors, help on stdout
// with flags the way the README writes them, aliases, exit statuses,
// --version and the logger flags.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// PrintDefaults writes every flag of fs to w as
//
//	--name TYPE
//	    usage (default VALUE)
//
// like flag.PrintDefaults, but with two dashes, as the README and the
// error messages name flags. An alias (Alias) follows its flag's name as
// "(also --alias)".
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	for _, f := range HelpFlags(fs) {
		line := "  --" + f.Name
		if f.Value != "" {
			line += " " + f.Value
		}
		if len(f.Aliases) > 0 {
			line += " (also --" + strings.Join(f.Aliases, ", --") + ")"
		}
		fmt.Fprintln(w, line)
		usage := strings.ReplaceAll(f.Usage, "\n", "\n      ")
		switch {
		case f.Default == "":
		case f.Quoted:
			usage += fmt.Sprintf(" (default %q)", f.Default)
		default:
			usage += fmt.Sprintf(" (default %s)", f.Default)
		}
		fmt.Fprintf(w, "      %s\n", usage)
	}
}

// HelpFlag is a flag as the help shows it.
type HelpFlag struct {
	Name    string   // without dashes
	Aliases []string // other names (Alias), without dashes
	// Value is what the flag takes: the usage's `PLACEHOLDER` or its
	// type (string, int, duration, ...); "" for a true/false flag.
	Value string
	Usage string // the usage, without the placeholder's quotes
	// Default is the default value, "" where the help leaves it out
	// (the type's zero value); Quoted: a string, printed quoted.
	Default string
	Quoted  bool
}

// HelpFlags lists fs's flags as PrintDefaults writes them, in name
// order: hidden flags (Hide) left out, an alias with its flag.
func HelpFlags(fs *flag.FlagSet) []HelpFlag {
	aliases := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if a, ok := f.Value.(*alias); ok {
			aliases[a.of] = append(aliases[a.of], f.Name)
		}
	})
	var out []HelpFlag
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Value.(type) {
		case *alias, *hidden:
			return
		}
		h := HelpFlag{Name: f.Name, Aliases: aliases[f.Name]}
		h.Value, h.Usage = flag.UnquoteUsage(f)
		if !isZero(f) {
			h.Default = f.DefValue
			h.Quoted = reflect.TypeOf(f.Value).String() == "*flag.stringValue"
		}
		out = append(out, h)
	})
	return out
}

// wrapped is a flag's Value inside another (hidden, alias) that keeps
// its IsBoolFlag and Get: the flag parses and reads as its own type.
type wrapped struct{ flag.Value }

func (w wrapped) IsBoolFlag() bool {
	b, ok := w.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (w wrapped) Get() any {
	if g, ok := w.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// hidden is a flag that PrintDefaults leaves out (Hide).
type hidden struct{ wrapped }

// Hide leaves fs's flags names, which must exist, out of the help: they
// work as before, for those who know them (a bench's hidden mode).
func Hide(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic(errors.New("cliflag: hiding an unknown flag --" + name))
		}
		f.Value = &hidden{wrapped{f.Value}}
	}
}

// isZero reports whether the flag's default is its type's zero value (not
// worth printing), as the flag package decides it.
func isZero(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
