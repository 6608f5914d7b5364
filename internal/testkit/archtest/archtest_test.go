package archtest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tapfwd/tapfwd"

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// list runs go list -json with args in the module's root.
func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func root(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func ours(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// offending returns the paths in list that bad matches.
func offending(list []string, bad func(string) bool) []string {
	var out []string
	for _, p := range list {
		if bad(p) {
			out = append(out, p)
		}
	}
	return out
}

func inBench(p string) bool {
	rel, ok := ours(p)
	return ok && (rel == "bench" || strings.HasPrefix(rel, "bench/"))
}

// TestFrameCodeDoesNoIO: the frame code imports no I/O: vnethdr nothing of
// ours, offload (GRO and segmentation) of ours only vnethdr.
func TestFrameCodeDoesNoIO(t *testing.T) {
	for dir, allowed := range map[string]string{"./vnethdr": "", "./offload": "vnethdr"} {
		p := list(t, dir)[0]
		bad := offending(p.Imports, func(s string) bool {
			rel, mine := ours(s)
			return mine && rel != allowed || s == "os" || s == "net" || s == "syscall" || strings.HasPrefix(s, "golang.org/x/sys")
		})
		if len(bad) > 0 {
			t.Errorf("%s imports %v", p.ImportPath, bad)
		}
	}
}

// TestForwardingPath: the data path never reaches metrics, the CLI or the
// bench, and forward depends on its own interfaces, not on afpacket, afxdp,
// tap or vhostuser.
func TestForwardingPath(t *testing.T) {
	for _, p := range list(t, "-deps=false", "./forward", "./afpacket", "./afxdp", "./tap", "./vnethdr", "./offload") {
		deps := list(t, "-deps", p.ImportPath)
		var all []string
		for _, d := range deps {
			all = append(all, d.ImportPath)
		}
		bad := offending(all, func(s string) bool {
			rel, mine := ours(s)
			return mine && (rel == "metrics" || strings.HasPrefix(rel, "cmd/") || inBench(s) ||
				(p.ImportPath == module+"/forward" && (rel == "afpacket" || rel == "afxdp" || rel == "tap" || strings.HasPrefix(rel, "vhostuser"))))
		})
		if len(bad) > 0 {
			t.Errorf("%s depends on %v", p.ImportPath, bad)
		}
	}
}

// TestDaemonLinksNoBenchmark: the tapfwd binary carries no benchmark, no
// plotting, no baseline TAP library and no testing package.
func TestDaemonLinksNoBenchmark(t *testing.T) {
	var all []string
	for _, d := range list(t, "-deps", "./cmd/tapfwd") {
		all = append(all, d.ImportPath)
	}
	bad := offending(all, func(s string) bool {
		return inBench(s) || s == "testing" || strings.HasPrefix(s, "gonum.org/") || strings.Contains(s, "songgao/water")
	})
	if len(bad) > 0 {
		t.Errorf("cmd/tapfwd links %v", bad)
	}
}

// TestDaemonLibraryNoCLI: the daemon library (and the keepers it starts)
// depends on no command and no command-line package: a test starts it
// with a Config, and the CLI is one of its callers.
func TestDaemonLibraryNoCLI(t *testing.T) {
	for _, lib := range []string{"./internal/daemon", "./internal/keeper"} {
		var all []string
		for _, d := range list(t, "-deps", lib) {
			all = append(all, d.ImportPath)
		}
		bad := offending(all, func(s string) bool {
			rel, mine := ours(s)
			return mine && (strings.HasPrefix(rel, "cmd/") || rel == "internal/cliflag" || inBench(s))
		})
		if len(bad) > 0 {
			t.Errorf("%s depends on %v", lib, bad)
		}
	}
}

// TestCommandsImportNoBench: of the commands, only tapfwd-bench imports
// anything under bench/.
func TestCommandsImportNoBench(t *testing.T) {
	for _, p := range list(t, "./cmd/...") {
		if rel, _ := ours(p.ImportPath); rel == "cmd/tapfwd-bench" {
			continue
		}
		if bad := offending(p.Imports, inBench); len(bad) > 0 {
			t.Errorf("%s imports %v", p.ImportPath, bad)
		}
	}
}

// TestBenchLinksNoTesting: the tapfwd-bench binary carries no testing
// package (test helpers stay in test files or behind interfaces).
func TestBenchLinksNoTesting(t *testing.T) {
	for _, d := range list(t, "-deps", "./cmd/tapfwd-bench") {
		if d.ImportPath == "testing" {
			t.Errorf("cmd/tapfwd-bench links testing")
		}
	}
}

// TestProductTestsImportNoBenchmark: no production package's tests pull in
// anything under bench/.
func TestProductTestsImportNoBenchmark(t *testing.T) {
	for _, p := range list(t, "./...") {
		rel, _ := ours(p.ImportPath)
		if inBench(p.ImportPath) || rel == "cmd/tapfwd-bench" {
			continue
		}
		var all []string
		for _, d := range list(t, "-deps", "-test", p.ImportPath) {
			all = append(all, d.ImportPath)
		}
		if bad := offending(all, inBench); len(bad) > 0 {
			t.Errorf("the tests of %s pull in %v", rel, bad)
		}
	}
}

// TestTestKitForTestsOnly: no package links the test kit outside tests,
// and of the kit's packages only prom, which parses tapfwd's metrics,
// imports metrics.
func TestTestKitForTestsOnly(t *testing.T) {
	inKit := func(s string) bool {
		rel, ok := ours(s)
		return ok && (rel == "internal/testkit" || strings.HasPrefix(rel, "internal/testkit/"))
	}
	for _, p := range list(t, "./...") {
		rel, _ := ours(p.ImportPath)
		if inKit(p.ImportPath) {
			if bad := offending(p.Imports, func(s string) bool { r, _ := ours(s); return r == "metrics" }); len(bad) > 0 && rel != "internal/testkit/prom" {
				t.Errorf("%s imports %v: only internal/testkit/prom reads metrics", rel, bad)
			}
			continue
		}
		if bad := offending(p.Imports, inKit); len(bad) > 0 {
			t.Errorf("%s (not its tests) imports %v", rel, bad)
		}
	}
}

// TestRefdocForTestsOnly: the generator of docs/reference is imported by
// tests alone, so no binary links it.
func TestRefdocForTestsOnly(t *testing.T) {
	for _, p := range list(t, "./...") {
		if bad := offending(p.Imports, func(s string) bool { r, _ := ours(s); return r == "internal/refdoc" }); len(bad) > 0 {
			t.Errorf("%s (not its tests) imports internal/refdoc", p.ImportPath)
		}
	}
}

var flagInText = regexp.MustCompile(`--[a-z][a-z-]+`)

// TestLibrariesNameNoFlags: error texts in library packages (everything but
// cmd/, internal/cliflag and bench/, whose job is the command line) name
// no flag: the CLI adds the advice.
func TestLibrariesNameNoFlags(t *testing.T) {
	for _, p := range list(t, "./...") {
		rel, _ := ours(p.ImportPath)
		if strings.HasPrefix(rel, "cmd/") || rel == "internal/cliflag" || inBench(p.ImportPath) || strings.HasPrefix(rel, "internal/testkit/archtest") {
			continue
		}
		for _, f := range p.GoFiles {
			for _, s := range errorTexts(t, filepath.Join(p.Dir, f)) {
				if m := flagInText.FindString(s); m != "" {
					t.Errorf("%s/%s: error text names the flag %s: %q", rel, f, m, s)
				}
			}
		}
	}
}

// errorTexts returns the string literals passed to errors.New and
// fmt.Errorf in the file.
func errorTexts(t *testing.T, path string) []string {
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || !(x.Name == "errors" && sel.Sel.Name == "New" || x.Name == "fmt" && sel.Sel.Name == "Errorf") {
			return true
		}
		if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}
