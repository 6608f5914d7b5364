package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPrintDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("tap", "", "TAP `NAME`; empty lets the kernel pick")
	fs.Int("queues", 1, "number of queues")
	fs.Bool("persist", false, "keep the TAP")
	fs.Duration("stats-interval", 0, "how often")
	fs.String("metrics-addr", "127.0.0.1:9310", "where")
	fs.String("tap-netns", "", "the namespace")
	Alias(fs, "netns", "tap-netns")
	var b strings.Builder
	PrintDefaults(&b, fs)
	got := b.String()
	for _, want := range []string{
		"  --tap NAME\n      TAP NAME; empty lets the kernel pick\n",
		"  --queues int\n      number of queues (default 1)\n",
		"  --persist\n      keep the TAP\n",
		"  --stats-interval duration\n      how often\n",
		"  --metrics-addr string\n      where (default \"127.0.0.1:9310\")\n",
		"  --tap-netns string (also --netns)\n      the namespace\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\n  -t") || strings.Contains(got, "  --netns") {
		t.Errorf("a flag with one dash, or the alias on a line of its own:\n%s", got)
	}
}

func TestDispatch(t *testing.T) {
	var out, errb strings.Builder
	ran := ""
	cmds := map[string]Command{
		"go":      func(a []string) error { ran = "go " + strings.Join(a, ","); return nil },
		"version": func(a []string) error { ran = "version " + strings.Join(a, ","); return nil },
	}
	for _, tc := range []struct {
		args    []string
		ran     string
		err     error
		out, er string
	}{
		{[]string{"go", "x", "y"}, "go x,y", nil, "", ""},
		{[]string{"--version"}, "version ", nil, "", ""},
		{[]string{"-V", "--json"}, "version --json", nil, "", ""},
		{[]string{"help", "go"}, "go --help", nil, "", ""},
		{[]string{"help"}, "", flag.ErrHelp, "USAGE\n", ""},
		{[]string{"--help"}, "", flag.ErrHelp, "USAGE\n", ""},
		{nil, "", ErrUsage, "", "USAGE\n"},
		{[]string{"nope"}, "", ErrUsage, "", ""},
	} {
		ran = ""
		out.Reset()
		errb.Reset()
		err := Dispatch("p", "USAGE\n", tc.args, cmds, &out, &errb)
		if ran != tc.ran || !errors.Is(err, tc.err) || out.String() != tc.out || errb.String() != tc.er {
			t.Errorf("Dispatch %q: ran %q, %v, stdout %q, stderr %q", tc.args, ran, err, out.String(), errb.String())
		}
	}
	err := Dispatch("p", "USAGE\n", []string{"nope"}, cmds, &out, &errb)
	if err == nil || err.Error() != `p: unknown command "nope" (see p --help)` {
		t.Errorf("unknown command: %v", err)
	}
}

// flags is a flag set of each kind for the parse tests; help goes to out.
func flags(out *strings.Builder) (*flag.FlagSet, *string, *bool, *time.Duration) {
	fs := NewFlagSet("p", "sub", "sub [flags]", out)
	ns := fs.String("tap-netns", "", "namespace")
	Alias(fs, "netns", "tap-netns")
	gro := fs.Bool("gro", true, "merge")
	fs.Int("queues", 1, "queues")
	fs.Uint("id", 0, "id")
	fs.Float64("target", 7.5, "target")
	every := fs.Duration("stats-interval", 0, "how often")
	return fs, ns, gro, every
}

// TestParse: what parses, and the one line each mistake gets.
func TestParse(t *testing.T) {
	var out strings.Builder
	fs, ns, gro, every := flags(&out)
	if err := Parse(fs, []string{"--netns", "lab", "-gro=false", "--stats-interval=10s"}); err != nil || *ns != "lab" || *gro || *every != 10*time.Second {
		t.Errorf("Parse: %v, ns %q, gro %v, every %v", err, *ns, *gro, *every)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["tap-netns"] || given["netns"] {
		t.Errorf("the alias sets its flag: %v", given)
	}
	for _, tc := range []struct{ args, want string }{
		{"--gro false", "--gro false: a true/false flag takes its value after '=': write --gro=false"},
		{"--gro true --queues 2", "--gro true: a true/false flag takes its value after '=': write --gro=true"},
		{"--stats-interval 10", "--stats-interval 10: want a duration with a unit, e.g. 10s"},
		{"--stats-interval soon", "--stats-interval soon: want a duration with a unit, e.g. 10s, 500ms or 20us"},
		{"--queues x", "--queues x: want a whole number"},
		{"--queues 99999999999999999999", "--queues 99999999999999999999: a number out of range"},
		{"--id -1", "--id -1: want a whole number, 0 or more"},
		{"--target x", "--target x: want a number"},
		{"--gro=maybe", "--gro maybe: want true or false"},
		{"--queues=", `--queues "": want a whole number`},
		{"--bogus", "unknown flag --bogus"},
		{"--queues", "--queues needs a value"},
		{"---x", `"---x" is not a flag: write --NAME or --NAME=VALUE`},
		{"--gro extra", `unexpected argument "extra"`},
		{"-- --gro", `unexpected argument "--gro"`},
	} {
		err := Parse(fs, strings.Fields(tc.args))
		var ue *UsageError
		if !errors.As(err, &ue) || err.Error() != "p sub: "+tc.want+" (see p sub --help)" {
			t.Errorf("Parse %q: %v, want the usage error %q", tc.args, err, tc.want)
		}
	}
	out.Reset()
	if err := Parse(fs, []string{"--queues", "2", "-h"}); !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(out.String(), "Usage: p sub [flags]\n\nFlags:\n") {
		t.Errorf("-h: %v, stdout %q", err, out.String())
	}
	files, err := ParseArgs(fs, []string{"a.json", "--queues", "3", "b.json", "--", "-c"})
	if err != nil || strings.Join(files, " ") != "a.json b.json -c" {
		t.Errorf("ParseArgs: %q, %v", files, err)
	}
}

func TestExit(t *testing.T) {
	var errb strings.Builder
	fs := NewFlagSet("p", "sub", "sub", &errb)
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{
		{nil, 0, ""}, {flag.ErrHelp, 0, ""}, {ErrUsage, 2, ""}, {errors.New("boom"), 1, "p: boom\n"},
		{Misuse(fs, "--n %d: want 1 to 3", 4), 2, "p sub: --n 4: want 1 to 3 (see p sub --help)\n"},
	} {
		if code := Exit("p", tc.err, &errb); code != tc.code || errb.String() != tc.msg {
			t.Errorf("Exit(%v) = %d, stderr %q; want %d, %q", tc.err, code, errb.String(), tc.code, tc.msg)
		}
		errb.Reset()
	}
}

// TestReadConfig: the file sets what the command line did not; each
// mistake is one line naming the file, the line and the key.
func TestReadConfig(t *testing.T) {
	conf := func(text string) string {
		p := filepath.Join(t.TempDir(), "lab.conf")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var out strings.Builder
	fs, ns, gro, _ := flags(&out)
	fs.String("config", "", "file")
	if err := Parse(fs, []string{"--tap-netns", "cli"}); err != nil {
		t.Fatal(err)
	}
	if err := ReadConfig(fs, conf("# a lab\ntap-netns = \"file\"\ngro = false\nqueues = 2\n")); err != nil || *ns != "cli" || *gro {
		t.Errorf("ReadConfig: %v, ns %q (the command line's), gro %v", err, *ns, *gro)
	}
	for _, tc := range []struct{ text, want string }{
		{"queues = 1\nfrobnicate = 1\n", `:2: unknown key "frobnicate" (keys are the flags of p sub, without dashes)`},
		{"queues = 1\nqueues = many\n", `:2: "queues" given again (first on line 1)`},
		{"queues = many\n", ":1: queues many: want a whole number"},
		{"queues\n", `:1: "queues" needs a value`},
		{"config = other.conf\n", ":1: a config file cannot name another one"},
	} {
		fs, _, _, _ := flags(&out)
		fs.String("config", "", "file")
		err := ReadConfig(fs, conf(tc.text))
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line containing %q", tc.text, err, tc.want)
		}
	}
	if err := ReadConfig(fs, "/nonexistent/lab.conf"); err == nil || errors.Is(err, ErrUsage) {
		t.Errorf("a missing file: %v, want an error that is not a usage error", err)
	}
}

func TestLogger(t *testing.T) {
	if _, err := Logger("debug", "json", os.Stderr); err != nil {
		t.Error(err)
	}
	for _, tc := range [][3]string{{"loud", "text", "--log-level loud: want debug, info, warn or error"}, {"info", "yaml", "--log-format yaml: want text or json"}} {
		if _, err := Logger(tc[0], tc[1], os.Stderr); err == nil || err.Error() != tc[2] {
			t.Errorf("Logger(%q, %q): %v, want %q", tc[0], tc[1], err, tc[2])
		}
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := Version("p", nil, &out); err != nil || !strings.HasPrefix(out.String(), "p ") || !strings.Contains(out.String(), "(revision ") {
		t.Errorf("version: %v, %q", err, out.String())
	}
	out.Reset()
	if err := Version("p", []string{"--json"}, &out); err != nil || !strings.Contains(out.String(), `"go_version":`) {
		t.Errorf("version --json: %v, %q", err, out.String())
	}
}

// TestHide: a hidden flag is missing from the help and still parses, its
// bad values said as those of any flag.
func TestHide(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	s := fs.String("ab-control", "", "the FIFO")
	d := fs.Duration("ab-delay", 0, "the delay")
	fs.Int("queues", 1, "number of queues")
	Hide(fs, "ab-control", "ab-delay")
	var b strings.Builder
	PrintDefaults(&b, fs)
	if got := b.String(); strings.Contains(got, "ab-") || !strings.Contains(got, "--queues") {
		t.Errorf("help:\n%s", got)
	}
	if err := Parse(fs, []string{"--ab-control", "/run/x", "--ab-delay=5us"}); err != nil || *s != "/run/x" || *d != 5*time.Microsecond {
		t.Errorf("Parse: %v, %q, %v", err, *s, *d)
	}
	if err := Parse(fs, []string{"--ab-delay", "5"}); err == nil || !strings.Contains(err.Error(), "want a duration with a unit, e.g. 5s") {
		t.Errorf("a bad value: %v", err)
	}
}

// TestRecordAndHelpFlags: Record sees each flag set NewFlagSet makes,
// until stopped; HelpFlags lists a set's flags as the help does.
func TestRecordAndHelpFlags(t *testing.T) {
	var got []Made
	stop := Record(func(m Made) { got = append(got, m) })
	var out strings.Builder
	fs, _, _, _ := flags(&out)
	fs.String("ab-control", "", "hidden")
	fs.String("tap", "", "TAP `NAME`")
	fs.String("addr", "127.0.0.1:9310", "where")
	Hide(fs, "ab-control")
	stop()
	NewFlagSet("p", "other", "other", &out)
	if len(got) != 1 || got[0].Prog != "p" || got[0].Name != "sub" || got[0].Synopsis != "sub [flags]" || got[0].FlagSet != fs {
		t.Fatalf("recorded %+v, want the one set flags made", got)
	}
	var names []string
	for _, f := range HelpFlags(fs) {
		names = append(names, fmt.Sprintf("%s%v|%s|%s|%q|%v", f.Name, f.Aliases, f.Value, f.Usage, f.Default, f.Quoted))
	}
	want := []string{`addr[]|string|where|"127.0.0.1:9310"|true`, `gro[]||merge|"true"|false`, `id[]|uint|id|""|false`,
		`queues[]|int|queues|"1"|false`, `stats-interval[]|duration|how often|""|false`, `tap[]|NAME|TAP NAME|""|false`,
		`tap-netns[netns]|string|namespace|""|false`, `target[]|float|target|"7.5"|false`}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("HelpFlags:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
}
