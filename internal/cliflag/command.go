package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ErrUsage marks errors already explained to the user by the flag package
// or by a usage text: the command exits 2 without another message.
var ErrUsage = errors.New("usage")

// A Command runs with the arguments after its name.
type Command func(args []string) error

// Dispatch runs the command of cmds that args[0] names. Without one, or
// with an unknown one, it prints usage to stderr and returns ErrUsage; for
// help, usage goes to stdout and it returns flag.ErrHelp.
func Dispatch(prog, usage string, args []string, cmds map[string]Command, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if cmd, ok := cmds[args[0]]; ok {
			return cmd(args[1:])
		}
		switch args[0] {
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", prog, args[0])
	}
	fmt.Fprint(stderr, usage)
	return ErrUsage
}

// Exit turns a command's error into its exit status: 0 for none or help,
// 2 for a usage error (already explained), else 1 after writing
// "prog: err" to stderr.
func Exit(prog string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	return 1
}

// NewFlagSet makes subcommand name's flag set: it reports errors instead
// of exiting, and its -h prints "Usage: prog synopsis" and the flags the
// way PrintDefaults writes them.
func NewFlagSet(prog, name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s\n\nFlags:\n", prog, synopsis)
		PrintDefaults(stderr, fs)
	}
	return fs
}

// Misuse explains a usage error: the line (format and args, as
// fmt.Sprintf makes them) and fs's usage go to its output; it returns
// ErrUsage.
func Misuse(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), format+"\n", args...)
	fs.Usage()
	return ErrUsage
}

// Parse parses args into fs and refuses positional arguments: errors come
// back as ErrUsage (explained already), help as flag.ErrHelp.
func Parse(prog string, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	if fs.NArg() > 0 {
		return Misuse(fs, "%s: unexpected argument %q", prog, fs.Arg(0))
	}
	return nil
}
