// Package clitest checks a command line the way tapfwd's commands promise
// to behave: exit status, output, and errors of one line.
package clitest

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// Case is one command line run in process: its arguments, its exit
// status and a string its output must contain. An alias of a struct type,
// so that tables of cases may leave the field names out.
type Case = struct {
	Args []string
	Code int
	Want string
}

// Check runs each case through run (a command's in-process entry point)
// and checks the status, the output, and that an error (status 1) is one
// line.
func Check(t testing.TB, prog string, run func(args []string, stdout, stderr io.Writer) int, cases []Case) {
	t.Helper()
	for _, tc := range cases {
		var out, errb bytes.Buffer
		code := run(tc.Args, &out, &errb)
		if code != tc.Code {
			t.Errorf("%s %q: exit %d, want %d; stderr: %s", prog, tc.Args, code, tc.Code, errb.String())
		}
		if !strings.Contains(out.String()+errb.String(), tc.Want) {
			t.Errorf("%s %q: output lacks %q:\n%s%s", prog, tc.Args, tc.Want, out.String(), errb.String())
		}
		if code == 1 && strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
			t.Errorf("%s %q: error is not one line:\n%s", prog, tc.Args, errb.String())
		}
	}
}

// OneLineError runs cmd and checks that it exits 1 with a one-line message
// containing want.
func OneLineError(t testing.TB, name string, cmd *exec.Cmd, want string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("%s: %v, want exit status 1\n%s", name, err, out)
	}
	if s := strings.TrimSpace(string(out)); strings.Contains(s, "\n") || !strings.Contains(s, want) {
		t.Errorf("%s: want one line containing %q, got:\n%s", name, want, s)
	}
}

// AsNobody runs exe with args as user nobody without capabilities (the
// test runs as root, with setpriv from util-linux) and checks for a
// one-line error containing want.
func AsNobody(t testing.TB, prog, exe, want string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv not installed (util-linux): %v", err)
	}
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", exe}, args...)...)
	OneLineError(t, prog+" "+strings.Join(args, " ")+" as nobody", cmd, want)
}
