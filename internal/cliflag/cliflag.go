// Package cliflag is what tapfwd's two commands share on the command line:
// subcommand dispatch, flag sets that print flags the way the README
// writes them (--name VALUE, the usage, the default), and exit statuses.
package cliflag

import (
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
// error messages name flags.
func PrintDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
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

// isZero reports whether the flag's default is its type's zero value (not
// worth printing), as the flag package decides it.
func isZero(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}
