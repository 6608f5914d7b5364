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
	aliases := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if a, ok := f.Value.(*alias); ok {
			aliases[a.of] = append(aliases[a.of], "--"+f.Name)
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Value.(type) {
		case *alias, *hidden:
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if a := aliases[f.Name]; len(a) > 0 {
			line += " (also " + strings.Join(a, ", ") + ")"
		}
		fmt.Fprintln(w, line)
		usage = strings.ReplaceAll(usage, "\n", "\n      ")
		switch {
		case isZero(f):
		case reflect.TypeOf(f.Value).String() == "*flag.stringValue":
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "      %s\n", usage)
	})
}

// hidden is a flag that PrintDefaults leaves out (Hide).
type hidden struct{ flag.Value }

func (h *hidden) IsBoolFlag() bool {
	b, ok := h.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (h *hidden) Get() any {
	if g, ok := h.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// Hide leaves fs's flags names, which must exist, out of the help: they
// work as before, for those who know them (a bench's hidden mode).
func Hide(fs *flag.FlagSet, names ...string) {
	for _, name := range names {
		f := fs.Lookup(name)
		if f == nil {
			panic(errors.New("cliflag: hiding an unknown flag --" + name))
		}
		f.Value = &hidden{f.Value}
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
