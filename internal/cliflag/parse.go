package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse parses args into fs (flags as -name, --name, --name=value, or
// --name value for all but bool flags) and refuses operands. Help (-h,
// --help) prints fs.Usage and is flag.ErrHelp; anything else wrong is a
// *UsageError of one line naming the flag, the value and what the flag
// wants.
func Parse(fs *flag.FlagSet, args []string) error {
	operands, err := ParseArgs(fs, args)
	if err == nil && len(operands) > 0 {
		err = Misuse(fs, "unexpected argument %q", operands[0])
	}
	return err
}

// ParseArgs is Parse for a command that takes operands: flags may come
// before, between and after them ("--" ends the flags), and it returns
// the operands in order.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	bareBool := "" // a bool flag given without =value just before
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(operands, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			if bareBool != "" && (a == "true" || a == "false") {
				return nil, Misuse(fs, "%s %s: a true/false flag takes its value after '=': write %s=%s", bareBool, a, bareBool, a)
			}
			operands, bareBool = append(operands, a), ""
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		bareBool = ""
		f := fs.Lookup(name)
		switch {
		case name == "" || name[0] == '-' || name[0] == '=':
			return nil, Misuse(fs, "%q is not a flag: write --NAME or --NAME=VALUE", a)
		case f == nil && (name == "h" || name == "help"):
			fs.Usage()
			return nil, flag.ErrHelp
		case f == nil:
			return nil, Misuse(fs, "unknown flag --%s", name)
		case isBool(f) && !hasValue:
			value, bareBool = "true", "--"+name
		case !hasValue && i+1 == len(args):
			return nil, Misuse(fs, "--%s needs a value", name)
		case !hasValue:
			i++
			value = args[i]
		}
		set := name
		if a, ok := f.Value.(*alias); ok {
			set = a.of
		}
		if err := fs.Set(set, value); err != nil {
			return nil, Misuse(fs, "%s", valueError("--"+name, value, f, err))
		}
	}
	return operands, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// valueError says what flag wants, in the user's words rather than the
// parser's.
func valueError(flagName, value string, f *flag.Flag, err error) string {
	given := flagName + " " + Quote(value)
	if strings.Contains(err.Error(), "out of range") {
		return given + ": a number out of range"
	}
	g, _ := f.Value.(flag.Getter)
	var v any
	if g != nil {
		v = g.Get()
	}
	switch v.(type) {
	case bool:
		return given + ": want true or false"
	case int, int64:
		return given + ": want a whole number"
	case uint, uint64:
		return given + ": want a whole number, 0 or more"
	case float64:
		return given + ": want a number"
	case time.Duration:
		if _, err := strconv.ParseFloat(value, 64); err == nil {
			return fmt.Sprintf("%s: want a duration with a unit, e.g. %ss", given, value)
		}
		return given + ": want a duration with a unit, e.g. 10s, 500ms or 20us"
	}
	return fmt.Sprintf("%s: %v", given, err)
}

// Quote is v as a message shows a value: as it is, or quoted when empty
// or when it holds a space or a quote.
func Quote(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\n\"'") {
		return strconv.Quote(v)
	}
	return v
}

// alias is a second name of a flag: setting it sets the flag.
type alias struct {
	wrapped
	of string // the flag's name
}

// Alias makes --as a second name of fs's flag --name, which must exist:
// PrintDefaults lists it beside the flag, and setting it sets the flag.
func Alias(fs *flag.FlagSet, as, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(errors.New("cliflag: alias of an unknown flag --" + name))
	}
	fs.Var(&alias{wrapped: wrapped{f.Value}, of: name}, as, "")
}
