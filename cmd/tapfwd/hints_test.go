package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
	"github.com/tapfwd/tapfwd/internal/daemon"
	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/tap"
)

// commands are tapfwd's commands that take flags.
var commands = []string{"run", "down", "vm-port add", "vm-port list", "vm-port del", "napi list", "napi set", "status", "features", "version"}

// suggestion finds "tapfwd CMD" in a text, followed by its flags.
var suggestion = regexp.MustCompile(`\btapfwd (` + strings.Join(commands, "|") + `)([ \t]|$)`)

// helpFlags are the flags CMD --help lists (aliases too), each with
// whether it takes a value.
func helpFlags(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	var out strings.Builder
	if code := run(append(strings.Fields(cmd), "--help"), &out, io.Discard); code != 0 {
		t.Fatalf("tapfwd %s --help: exit %d", cmd, code)
	}
	flags := map[string]bool{}
	for l := range strings.SplitSeq(out.String(), "\n") {
		f := strings.Fields(l)
		if !strings.HasPrefix(l, "  --") || len(f) == 0 {
			continue
		}
		takesValue := len(f) > 1 && f[1] != "(also"
		flags[strings.TrimPrefix(f[0], "--")] = takesValue
		if i := strings.Index(l, "(also "); i >= 0 {
			for a := range strings.SplitSeq(strings.TrimSuffix(l[i+len("(also "):], ")"), ", ") {
				flags[strings.TrimPrefix(a, "--")] = takesValue
			}
		}
	}
	if len(flags) == 0 {
		t.Fatalf("tapfwd %s --help lists no flags:\n%s", cmd, out.String())
	}
	return flags
}

// checkSuggestions checks every "tapfwd CMD --flag VALUE ..." in text:
// each flag is one CMD takes. It returns how many it checked, and the
// suggestions with a flag CMD does not take.
func checkSuggestions(text string, flags map[string]map[string]bool) (n int, bad []string) {
	text = strings.ReplaceAll(text, "\\\n", " ") // shell line continuations
	for _, m := range suggestion.FindAllStringSubmatchIndex(text, -1) {
		cmd := text[m[2]:m[3]]
		rest, _, _ := strings.Cut(text[m[1]:], "\n")
		words := strings.Fields(rest)
		for i := 0; i < len(words); i++ {
			w := strings.TrimLeft(words[i], "[")
			if !strings.HasPrefix(w, "--") {
				break
			}
			name, _, hasValue := strings.Cut(strings.TrimPrefix(w, "--"), "=")
			end := strings.ContainsAny(w[len(w)-1:], ").,;:`'\"") // the sentence goes on
			name = strings.TrimRight(name, ")].,;:`'\"")
			takesValue, ok := flags[cmd][name]
			if !ok && name != "help" { // every command takes --help
				bad = append(bad, fmt.Sprintf("%q: tapfwd %s takes no --%s", text[m[0]:m[1]]+rest, cmd, name))
			}
			n++
			if takesValue && !hasValue && !end && i+1 < len(words) {
				i++ // its value
				end = strings.ContainsAny(words[i][len(words[i])-1:], ").,;:`'\"")
			}
			if end {
				break
			}
		}
	}
	return n, bad
}

// TestHintsNameFlagsTheyTake: every "tapfwd CMD --flag" that tapfwd's code
// (messages, log lines, help), its advice for each typed error, the
// README, docs/, deploy/ and scripts/ show names flags CMD takes; and every flag a
// start failure's advice or the daemon's log names is one of run's.
func TestHintsNameFlagsTheyTake(t *testing.T) {
	flags := map[string]map[string]bool{}
	for _, c := range commands {
		flags[c] = helpFlags(t, c)
	}
	if !flags["vm-port add"]["tap-netns"] || !flags["vm-port add"]["netns"] || !flags["down"]["netns"] || !flags["vm-port add"]["owner"] {
		t.Errorf("--tap-netns with its alias --netns, --vm-port-owner with --owner: %v, %v", flags["vm-port add"], flags["down"])
	}
	n, bad := checkSuggestions("(see: tapfwd down --tap x --netns lab --vm-port-owner qemu), tapfwd vm-port list [--json] --bogus", flags)
	if n != 5 || len(bad) != 2 || !strings.Contains(bad[0], "takes no --vm-port-owner") || !strings.Contains(bad[1], "takes no --bogus") {
		t.Fatalf("the check itself: %d flags, %q", n, bad)
	}
	n = 0
	check := func(where, text string) {
		m, bad := checkSuggestions(text, flags)
		n += m
		for _, b := range bad {
			t.Errorf("%s: %s", where, b)
		}
	}
	for path, text := range hintTexts(t) {
		check(path, text)
	}
	advice, dynamic := runAdvice(t)
	check("advice", strings.Join(append(advice, dynamic...), "\n"))
	t.Logf("%d flags in suggestions checked", n)
	if n < 40 {
		t.Errorf("checked only %d flags in suggestions: is the scan broken?", n)
	}
	for _, src := range []struct {
		where string
		text  string
	}{{"the advice of run", strings.Join(advice, "\n")}, {"internal/daemon", strings.Join(goStrings(t, "../../internal/daemon")["../../internal/daemon"], "\n")}} {
		for _, f := range regexp.MustCompile(`--[a-z][a-z-]*`).FindAllString(src.text, -1) {
			if _, ok := flags["run"][f[2:]]; !ok {
				t.Errorf("%s names %s, which tapfwd run does not take", src.where, f)
			}
		}
	}
}

// hintTexts are the texts whose suggestions TestHintsNameFlagsTheyTake
// checks, by path: the README, CONTRIBUTING, docs/ (its pages and
// theirs one folder down), deploy/ and scripts/, and the
// string literals of the Go code, by directory.
func hintTexts(t *testing.T) map[string]string {
	t.Helper()
	texts := map[string]string{}
	files, _ := filepath.Glob("../../docs/*.md")
	sub, _ := filepath.Glob("../../docs/*/*.md")
	files = append(append(files, sub...), "../../CONTRIBUTING.md")
	for _, dir := range []string{"../../deploy", "../../scripts"} {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, path)
			}
			return err
		})
	}
	for _, path := range append(files, "../../README.md") {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts[path] = string(b)
	}
	for path, lits := range goStrings(t, "../..") {
		texts[path] = strings.Join(lits, "\n")
	}
	return texts
}

// runAdvice is what tapfwd puts together at run time: the advice of run
// for each typed error of a start, and the other commands' advice and
// hints.
func runAdvice(t *testing.T) (advice, dynamic []string) {
	t.Helper()
	c, err := parseRun(strings.Fields("--nic w1 --tap lab0 --tap-netns lab"), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{tap.ErrPersistent, tap.ErrMismatch, tap.ErrOwned, tap.ErrAttached, tap.ErrNameInUse, tap.ErrNoMultiQueue} {
		advice = append(advice, explainRun(fmt.Errorf("open the TAP: %w", e), c).Error())
	}
	for p := daemon.PartUser; p <= daemon.PartNICNAPICPU; p++ {
		advice = append(advice, explainRun(&daemon.Error{Part: p, Err: errors.New("x")}, c).Error())
	}
	for _, kind := range []error{tapport.ErrNoTAP, tapport.ErrNoPort, tapport.ErrMACInUse, tapport.ErrNameInUse} {
		for _, ns := range []string{"", "lab"} {
			dynamic = append(dynamic, explain(&tapport.Error{Kind: kind, Name: "lab0", Netns: ns}).Error())
		}
	}
	for _, m := range append(advice, dynamic...) {
		if why := clitest.Flaw(m); why != "" {
			t.Errorf("advice %q %s", m, why)
		}
	}
	dynamic = append(dynamic, daemon.DownCommand("lab0", "lab"), "tapfwd vm-port del --name vm0"+vmNetnsFlag("lab"))
	return advice, dynamic
}

// goStrings are the string literals of the non-test Go files under root,
// by directory.
func goStrings(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
			return fs.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[filepath.Dir(path)] = append(out[filepath.Dir(path)], s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
