package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The command line stays thin (docs/design/architecture.md): what it does beyond
// flags, advice and dispatch belongs in a library.
const (
	maxCLILines     = 1200 // non-blank lines of cmd/tapfwd's non-test code
	maxCLITestLines = 1500 // non-blank lines of cmd/tapfwd's tests
	maxCmdFuncLines = 60   // lines of any function in cmd/, tests included
)

// TestThinCLI holds cmd/tapfwd to its size and every function under cmd/
// to a screen.
func TestThinCLI(t *testing.T) {
	dir := filepath.Join(root(t), "cmd", "tapfwd")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("cmd/tapfwd's files: %v %v", files, err)
	}
	code, tests := 0, 0
	for _, f := range files {
		n := nonBlank(t, f)
		if strings.HasSuffix(f, "_test.go") {
			tests += n
		} else {
			code += n
		}
	}
	if code > maxCLILines || tests > maxCLITestLines {
		t.Errorf("cmd/tapfwd: %d non-blank lines of code (at most %d), %d of tests (at most %d): move what is not flags, advice or dispatch into a library",
			code, maxCLILines, tests, maxCLITestLines)
	}
	t.Logf("cmd/tapfwd: %d non-blank lines of code, %d of tests", code, tests)
	for _, f := range longFuncs(t, filepath.Join(root(t), "cmd"), maxCmdFuncLines) {
		t.Errorf("%s: over %d lines", f, maxCmdFuncLines)
	}
}

// nonBlank counts the lines of file that hold more than white space.
func nonBlank(t *testing.T, file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// longFuncs are the functions below dir longer than limit lines, as
// file:line name (lines).
func longFuncs(t *testing.T, dir string, limit int) []string {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > limit {
				rel, _ := filepath.Rel(root(t), path)
				out = append(out, rel+":"+strconv.Itoa(start.Line)+" "+fd.Name.Name+" ("+strconv.Itoa(n)+" lines)")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
