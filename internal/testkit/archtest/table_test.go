package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// tableRow is one row of docs/design/architecture.md's package table: the
// packages it is about (exact paths, or a path ending in "/..." for a
// tree) and the packages of ours they import, as the row writes them.
type tableRow struct {
	line    int
	pkgs    []string
	imports []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// packageTable reads the package table: the rows between "## Packages"
// and the next section.
func packageTable(t *testing.T) []tableRow {
	src, err := os.ReadFile(filepath.Join(root(t), "docs", "design", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []tableRow
	in := false
	for i, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## Packages"
		case in && strings.HasPrefix(l, "| `"):
			cells := strings.Split(l, " | ")
			if len(cells) < 3 {
				t.Fatalf("architecture.md:%d: a row of the package table needs three cells", i+1)
			}
			rows = append(rows, tableRow{line: i + 1, pkgs: ticks(cells[0]), imports: ticks(cells[len(cells)-1])})
		}
	}
	if len(rows) == 0 {
		t.Fatal("architecture.md has no package table under ## Packages")
	}
	return rows
}

func ticks(cell string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// covers reports whether a row's package pattern names package rel.
func covers(pattern, rel string) bool {
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return rel == tree || strings.HasPrefix(rel, tree+"/")
	}
	return rel == pattern
}

// TestArchitectureTable: every package of ours has exactly one row in
// docs/design/architecture.md's table, and each row's import column is
// what go list says those packages import of ours (test files aside),
// so the table cannot drift from the code.
func TestArchitectureTable(t *testing.T) {
	imports := map[string][]string{}
	for _, p := range list(t, "./...") {
		rel, _ := ours(p.ImportPath)
		for _, s := range p.Imports {
			if r, mine := ours(s); mine {
				imports[rel] = append(imports[rel], r)
			}
		}
		if _, ok := imports[rel]; !ok {
			imports[rel] = nil
		}
	}
	seen := map[string]int{}
	for _, row := range packageTable(t) {
		checkRow(t, row, imports, seen)
	}
	for rel := range imports {
		if seen[rel] == 0 {
			t.Errorf("package %s has no row in docs/design/architecture.md's package table", rel)
		}
	}
}

// checkRow compares one row with go list and counts the packages it names.
func checkRow(t *testing.T, row tableRow, imports map[string][]string, seen map[string]int) {
	var members []string
	for _, pat := range row.pkgs {
		n := 0
		for rel := range imports {
			if covers(pat, rel) {
				members = append(members, rel)
				if seen[rel]++; seen[rel] == 2 {
					t.Errorf("architecture.md:%d: %s has a row already", row.line, rel)
				}
				n++
			}
		}
		if n == 0 {
			t.Errorf("architecture.md:%d: %s is no package of this module", row.line, pat)
		}
	}
	var got []string
	for _, m := range members {
		for _, imp := range imports[m] {
			if slices.ContainsFunc(row.pkgs, func(p string) bool { return covers(p, imp) }) {
				continue
			}
			// A tree in the import column ("bench/...") stands for its packages.
			if i := slices.IndexFunc(row.imports, func(p string) bool { return strings.HasSuffix(p, "/...") && covers(p, imp) }); i >= 0 {
				imp = row.imports[i]
			}
			got = append(got, imp)
		}
	}
	slices.Sort(got)
	got = slices.Compact(got)
	want := slices.Clone(row.imports)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("architecture.md:%d: %v import %v of ours; the table says %v", row.line, row.pkgs, got, want)
	}
}

// upper is the product's own internal packages: what only the commands,
// and the product's internals among themselves, may import.
var upper = []string{"internal/daemon", "internal/keeper", "internal/cliflag", "internal/privdrop", "internal/tapport", "internal/dhcp", "internal/abtap"}

// allowedInternal says which internal packages of ours a package may
// depend on, by the room it is in; ok is false for rooms with no rule
// here (the commands, the product's internals, the test kit, the tests).
func allowedInternal(rel string) (allow func(dep string) bool, ok bool) {
	under := func(dep string, trees ...string) bool {
		return slices.ContainsFunc(trees, func(tr string) bool { return dep == tr || strings.HasPrefix(dep, tr+"/") })
	}
	switch {
	case under(rel, "internal/base"):
		return func(dep string) bool { return under(dep, "internal/base") }, true
	case under(rel, "internal/lab"):
		return func(dep string) bool { return !under(dep, upper...) && !under(dep, "internal/testkit") }, true
	case under(rel, "bench"):
		// The bench drives the A/B mode of internal/abtap through its
		// arm byte and delay unit.
		return func(dep string) bool { return under(dep, "internal/base", "internal/lab", "internal/abtap") }, true
	case under(rel, "internal", "cmd", "e2e", "deploy", "scripts"):
		return nil, false
	}
	// A public library: of the internal packages only the bottom, and its own.
	return func(dep string) bool { return under(dep, "internal/base") }, true
}

// TestImportsPointDown: no package imports a room above it. Public
// libraries reach only internal/base of the internal packages, the lab
// reaches none of the product's internals and no test kit, internal/base
// reaches only itself, and the bench reaches the lab, the bottom and the
// A/B mode it drives.
func TestImportsPointDown(t *testing.T) {
	for _, p := range list(t, "./...") {
		rel, _ := ours(p.ImportPath)
		allow, ok := allowedInternal(rel)
		if !ok {
			continue
		}
		bad := offending(p.Deps, func(s string) bool {
			dep, mine := ours(s)
			// A package's own internal/ tree is Go's business, not a room.
			return mine && strings.HasPrefix(dep, "internal/") && !allow(dep)
		})
		if len(bad) > 0 {
			t.Errorf("%s depends on %v, a room above it", rel, bad)
		}
	}
}

// TestPackageDocsNameNoPackage: a package's doc says what it holds in its
// own words; naming another package of ours ("package vmport",
// "tapport.Error", "`hostport`") is how docs went stale when rooms moved.
func TestPackageDocsNameNoPackage(t *testing.T) {
	pkgs := list(t, "./...")
	names := map[string]bool{}
	for _, p := range pkgs {
		names[filepath.Base(p.ImportPath)] = true
	}
	for _, p := range pkgs {
		doc := packageDoc(t, p)
		self := filepath.Base(p.ImportPath)
		for name := range names {
			if name == self {
				continue
			}
			re := regexp.MustCompile(`\bpackage ` + name + `\b|\b` + name + `\.[A-Z]|` + "`" + name + "`")
			if m := re.FindString(doc); m != "" {
				rel, _ := ours(p.ImportPath)
				t.Errorf("the doc of %s names package %s (%q)", rel, name, m)
			}
		}
	}
}

// packageDoc is the comment on the package clause of p's files.
func packageDoc(t *testing.T, p pkg) string {
	var doc strings.Builder
	for _, f := range p.GoFiles {
		af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if af.Doc != nil {
			doc.WriteString(af.Doc.Text())
		}
	}
	return doc.String()
}
