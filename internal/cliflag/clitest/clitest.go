// Package clitest checks a command line the way tapfwd's commands promise
// to behave: exit status, output, and errors of one line.
package clitest

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/lab/need"
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
// and checks the status and the output, and how the command talks: with
// status 0 nothing goes to stderr (help goes to stdout); an error (status
// 1) is one line; a usage error (status 2) is one line that points at the
// command's --help, unless it is the usage text a bare command prints.
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
		msg := strings.TrimSpace(errb.String())
		usage := strings.HasPrefix(msg, "Usage:") || strings.HasPrefix(msg, prog+":") && strings.Contains(msg, "\nUsage:")
		switch {
		case code == 0 && msg != "":
			t.Errorf("%s %q: exit 0 with stderr:\n%s", prog, tc.Args, msg)
		case code != 0 && !usage && strings.Contains(msg, "\n"):
			t.Errorf("%s %q: error is not one line:\n%s", prog, tc.Args, msg)
		case code == 2 && !usage && !strings.HasSuffix(msg, " --help)"):
			t.Errorf("%s %q: a usage error that does not point at --help: %s", prog, tc.Args, msg)
		case code != 0 && !usage && Flaw(msg) != "":
			t.Errorf("%s %q: the message %s: %s", prog, tc.Args, Flaw(msg), msg)
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
	if s := strings.TrimSpace(string(out)); Flaw(s) != "" || !strings.Contains(s, want) {
		t.Errorf("%s: want one line in the user's words containing %q, got:\n%s", name, want, s)
	}
}

// AsNobody runs exe with args as user nobody without capabilities (the
// test runs as root, with setpriv from util-linux) and checks for a
// one-line error containing want.
func AsNobody(t testing.TB, prog, exe, want string, args ...string) {
	t.Helper()
	need.Tools(t, "setpriv")
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", exe}, args...)...)
	OneLineError(t, prog+" "+strings.Join(args, " ")+" as nobody", cmd, want)
}

// goInternals are what a message must not show a user: Go's and the
// standard library's words instead of the user's.
var goInternals = []string{"netip.", "ParsePrefix", "ip+net", "strconv.", "invalid syntax", "%!", "parse error",
	"flag provided but not defined", "<nil>", "Get \"http", "dial tcp", "route ", "netlink receive", "-buildvcs",
	"physical device", "goroutine ", "panic:"}

// bareErrno is a system call's failure at the end of a message, with
// nothing said about what to do.
var bareErrno = regexp.MustCompile(`(sched_setaffinity|ioctl|setns|setsockopt|bind|sendmsg|recvmsg|receive): [a-z ]+$`)

// GoPackage is the name of one of tapfwd's Go packages at the head of a
// message or of a part of it ("tapfwd: netns: ..."): a user reads what
// was being done, not which package said so.
// A subcommand's own name after the command's ("tapfwd napi: ...") is
// not one.
var GoPackage = regexp.MustCompile(`(^|[^\w-]\s|^\s)(netns|vmport|tapport|hostport|vhostuser|afpacket|afxdp|napi|tap|daemon|dhcp|keeper|privdrop|uring|procfs|forward|fabric|vnethdr|offload|abtap): `)

// Flaw says what is wrong with msg, a message to a user, if anything: a
// Go internal or package name, more than one line, or an errno at the
// end without context. It is empty for a message in the user's words.
func Flaw(msg string) string {
	for _, bad := range goInternals {
		if strings.Contains(msg, bad) {
			return "shows " + bad
		}
	}
	if m := GoPackage.FindStringSubmatch(msg); m != nil {
		return "names the Go package " + m[2]
	}
	switch s := strings.TrimSpace(msg); {
	case strings.Contains(s, "\n"):
		return "is more than one line"
	case bareErrno.MatchString(s):
		return "ends in an errno without saying what to do"
	}
	return ""
}
