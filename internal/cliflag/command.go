package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
)

// ErrUsage marks errors already explained to the user by a usage text: the
// command exits 2 without another message.
var ErrUsage = errors.New("usage")

// A UsageError is a command line that cannot run: an unknown flag, a
// value a flag does not take, a missing required flag. Exit prints it as
// one line that ends by pointing at the command's help, and exits 2.
type UsageError struct {
	Command string // "tapfwd run"
	Err     error  // what is wrong, naming the flag and the value
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("%s: %v (see %s --help)", e.Command, e.Err, e.Command)
}

func (e *UsageError) Unwrap() error { return e.Err }

// Is makes a UsageError match ErrUsage.
func (e *UsageError) Is(target error) bool { return target == ErrUsage }

// A Command runs with the arguments after its name.
type Command func(args []string) error

// Dispatch runs the command of cmds that args[0] names. "help",
// "--help" and "-h" print usage to stdout and return flag.ErrHelp; "help
// CMD" is CMD's --help. "--version" and "-V" run the "version" command,
// where cmds has one. Without a command it prints usage to stderr and
// returns ErrUsage; an unknown command is a *UsageError.
func Dispatch(prog, usage string, args []string, cmds map[string]Command, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ErrUsage
	}
	if cmd, ok := cmds[args[0]]; ok {
		return cmd(args[1:])
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if cmd, ok := cmds[at(args, 1)]; ok {
			return cmd([]string{"--help"})
		}
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	case "-V", "--version":
		if cmd, ok := cmds["version"]; ok {
			return cmd(args[1:])
		}
	}
	return &UsageError{Command: prog, Err: fmt.Errorf("unknown command %q", args[0])}
}

func at(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

// Exit turns a command's error into its exit status: 0 for none or help,
// 2 for a usage error (a *UsageError, printed as its one line), else 1
// after writing "prog: err" to stderr.
func Exit(prog string, err error, stderr io.Writer) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, ue)
		return 2
	case errors.Is(err, ErrUsage):
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", prog, err)
	return 1
}

// NewFlagSet makes the flag set of command "prog name": its help (-h,
// --help) goes to stdout as "Usage: prog synopsis" and the flags the way
// PrintDefaults writes them; Parse reports errors, the flag set prints
// none.
func NewFlagSet(prog, name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(prog+" "+name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: %s %s\n\nFlags:\n", prog, synopsis)
		PrintDefaults(stdout, fs)
	}
	recorder.Lock()
	if fn := recorder.fn; fn != nil {
		fn(Made{Prog: prog, Name: name, Synopsis: synopsis, FlagSet: fs})
	}
	recorder.Unlock()
	return fs
}

// Made is a flag set NewFlagSet made, with its command's names.
type Made struct {
	Prog, Name, Synopsis string // "tapfwd", "vm-port add", "vm-port add --tap NAME ..."
	FlagSet              *flag.FlagSet
}

var recorder struct {
	sync.Mutex
	fn func(Made)
}

// Record calls fn with each flag set NewFlagSet makes, until stop is
// called: how the reference page of the flags (docs/reference) gets every
// subcommand's flag set, from the command's own code, by asking each
// subcommand for its --help.
func Record(fn func(Made)) (stop func()) {
	recorder.Lock()
	defer recorder.Unlock()
	recorder.fn = fn
	return func() {
		recorder.Lock()
		defer recorder.Unlock()
		recorder.fn = nil
	}
}

// Misuse is a usage error of fs's command: the line format and args make
// (fmt.Errorf: %w wraps).
func Misuse(fs *flag.FlagSet, format string, args ...any) error {
	return &UsageError{Command: fs.Name(), Err: fmt.Errorf(format, args...)}
}
