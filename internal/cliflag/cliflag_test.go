package cliflag

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestPrintDefaults(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("tap", "", "TAP `NAME`; empty lets the kernel pick")
	fs.Int("queues", 1, "number of queues")
	fs.Bool("persist", false, "keep the TAP")
	fs.Duration("stats-interval", 0, "how often")
	fs.String("metrics-addr", "127.0.0.1:9310", "where")
	var b strings.Builder
	PrintDefaults(&b, fs)
	got := b.String()
	for _, want := range []string{
		"  --tap NAME\n      TAP NAME; empty lets the kernel pick\n",
		"  --queues int\n      number of queues (default 1)\n",
		"  --persist\n      keep the TAP\n",
		"  --stats-interval duration\n      how often\n",
		"  --metrics-addr string\n      where (default \"127.0.0.1:9310\")\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\n  -t") {
		t.Errorf("a flag with one dash:\n%s", got)
	}
}

func TestDispatchParseExit(t *testing.T) {
	var out, errb strings.Builder
	ran := ""
	cmds := map[string]Command{"go": func(a []string) error { ran = strings.Join(a, ","); return nil }}
	if err := Dispatch("p", "USAGE\n", []string{"go", "x", "y"}, cmds, &out, &errb); err != nil || ran != "x,y" {
		t.Errorf("Dispatch go x y: %v, ran %q", err, ran)
	}
	if err := Dispatch("p", "USAGE\n", []string{"help"}, cmds, &out, &errb); !errors.Is(err, flag.ErrHelp) || out.String() != "USAGE\n" {
		t.Errorf("help: %v, stdout %q", err, out.String())
	}
	if err := Dispatch("p", "USAGE\n", []string{"nope"}, cmds, &out, &errb); !errors.Is(err, ErrUsage) || !strings.Contains(errb.String(), `p: unknown command "nope"`) {
		t.Errorf("unknown: %v, stderr %q", err, errb.String())
	}

	errb.Reset()
	fs := NewFlagSet("p", "sub", "sub [--n N]", &errb)
	n := fs.Int("n", 1, "how many")
	if err := Parse("p", fs, []string{"--n", "3"}); err != nil || *n != 3 {
		t.Errorf("Parse --n 3: %v, n=%d", err, *n)
	}
	if err := Parse("p", fs, []string{"extra"}); !errors.Is(err, ErrUsage) || !strings.Contains(errb.String(), `p: unexpected argument "extra"`) || !strings.Contains(errb.String(), "Usage: p sub [--n N]") {
		t.Errorf("Parse extra: %v, stderr %q", err, errb.String())
	}
	if err := Parse("p", fs, []string{"--bogus"}); !errors.Is(err, ErrUsage) {
		t.Errorf("Parse --bogus: %v", err)
	}
	if err := Parse("p", fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(errb.String(), "  --n int\n") {
		t.Errorf("Parse -h: %v, stderr %q", err, errb.String())
	}

	errb.Reset()
	for _, tc := range []struct {
		err  error
		code int
		msg  string
	}{{nil, 0, ""}, {flag.ErrHelp, 0, ""}, {ErrUsage, 2, ""}, {errors.New("boom"), 1, "p: boom\n"}} {
		if code := Exit("p", tc.err, &errb); code != tc.code || errb.String() != tc.msg {
			t.Errorf("Exit(%v) = %d, stderr %q; want %d, %q", tc.err, code, errb.String(), tc.code, tc.msg)
		}
		errb.Reset()
	}
}
