package refdoc

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tapfwd/tapfwd/internal/cliflag"
)

// inModule makes a module in a temporary directory and works there.
func inModule(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return filepath.Join(dir, Dir)
}

func read(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheck: a missing or different page is stale, named as make
// reference's; updating writes it, and then it is not.
func TestCheck(t *testing.T) {
	dir := inModule(t)
	err := Check("x.md", []byte("# X\n"))
	if !errors.Is(err, ErrStale) || !strings.HasPrefix(err.Error(), "docs/reference/x.md is stale: run make reference\n") {
		t.Fatalf("a missing page: %v", err)
	}
	t.Setenv(UpdateEnv, "update")
	if err := Check("x.md", []byte("# X\n")); err != nil || read(t, filepath.Join(dir, "x.md")) != "# X\n" {
		t.Fatalf("update: %v", err)
	}
	t.Setenv(UpdateEnv, "")
	if err := Check("x.md", []byte("# X\n")); err != nil {
		t.Errorf("the page as written: %v", err)
	}
	err = Check("x.md", []byte("# Y\n"))
	if want := "docs/reference/x.md is stale: run make reference\nline 1: the page has \"# X\"\nthe code makes \"# Y\""; err == nil || err.Error() != want {
		t.Errorf("a changed page: %v, want %q", err, want)
	}
}

// TestSections: each section is written and checked alone, the others
// kept; a changed head or section is stale.
func TestSections(t *testing.T) {
	dir := inModule(t)
	p := Sections{Page: "s.md", Head: "# S\n", Names: []string{"a", "b"}}
	t.Setenv(UpdateEnv, "update")
	if err := p.Check("b", []byte("B\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.Check("a", []byte("A\n")); err != nil {
		t.Fatal(err)
	}
	want := "# S\n\n<!-- a: begin (generated) -->\nA\n<!-- a: end -->\n\n<!-- b: begin (generated) -->\nB\n<!-- b: end -->\n"
	if got := read(t, filepath.Join(dir, "s.md")); got != want {
		t.Fatalf("page:\n%s\nwant:\n%s", got, want)
	}
	t.Setenv(UpdateEnv, "")
	if err := p.Check("a", []byte("A\n")); err != nil {
		t.Error(err)
	}
	if err := p.Check("b", []byte("B2\n")); !errors.Is(err, ErrStale) {
		t.Errorf("a changed section: %v", err)
	}
	p.Head = "# S2\n"
	if err := p.Check("a", []byte("A\n")); !errors.Is(err, ErrStale) {
		t.Errorf("a changed head: %v", err)
	}
	if err := p.Check("c", nil); err == nil || errors.Is(err, ErrStale) {
		t.Errorf("an unknown section: %v", err)
	}
}

// TestFlagsSection: a table row per flag the help shows, aliases beside
// their flag, hidden flags left out, cells escaped.
func TestFlagsSection(t *testing.T) {
	var sets []cliflag.Made
	stop := cliflag.Record(func(m cliflag.Made) { sets = append(sets, m) })
	fs := cliflag.NewFlagSet("p", "sub", "sub [flags]", io.Discard)
	stop()
	fs.String("tap-netns", "", "the `NS` | namespace")
	cliflag.Alias(fs, "netns", "tap-netns")
	fs.String("addr", "127.0.0.1:9310", "where, e.g. <host>")
	fs.Bool("gro", true, "merge")
	fs.Duration("ab-delay", 0, "secret")
	cliflag.Hide(fs, "ab-delay")
	got := string(FlagsSection("p", sets))
	want := "\n## p\n\n### p sub\n\n`p sub [flags]`\n\n| flag | value | default | description |\n|---|---|---|---|\n" +
		"| `--addr` | `string` | `\"127.0.0.1:9310\"` | where, e.g. &lt;host&gt; |\n" +
		"| `--gro` |  | `true` | merge |\n" +
		"| `--tap-netns` (also `--netns`) | `NS` |  | the NS \\| namespace |\n\n"
	if got != want {
		t.Errorf("section:\n%s\nwant:\n%s", got, want)
	}
}

// TestFromDesc reads a descriptor's name, help, labels and constant
// labels' names.
func TestFromDesc(t *testing.T) {
	d := prometheus.NewDesc("x_total", `Frames "x", by reason.`, []string{"device", "reason"}, prometheus.Labels{"version": "go1"})
	m, err := FromDesc(d)
	if err != nil || m.Name != "x_total" || m.Help != `Frames "x", by reason.` || strings.Join(m.Labels, ",") != "device,reason" || strings.Join(m.ConstLabels, ",") != "version" {
		t.Errorf("FromDesc: %+v, %v", m, err)
	}
	m.Type = "counter"
	if page := string(MetricsPage([]Metric{m}, nil)); !strings.Contains(page, "| `x_total` | counter | `device`, `reason`, `version` (constant) | Frames \"x\", by reason. |\n") {
		t.Errorf("page:\n%s", page)
	}
}

// top and inner are a JSON layout for TestJSONPage.
type top struct {
	// Name is the thing's name, Count how many.
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"`

	Secret string `json:"-"`
	// When is a time.
	When  time.Time         `json:"when"`
	Inner *inner            `json:"inner,omitempty"`
	Tags  map[string]uint64 `json:"tags"`
	List  []inner           `json:"list"`
}

// inner is nested.
type inner struct {
	OK bool `json:"ok"` // OK says so
}

// TestJSONPage: a table per object type, each field's JSON name, type
// and doc comment with Go names written as JSON names; a comment shared
// by the fields right below it.
func TestJSONPage(t *testing.T) {
	page, err := JSONPage("T", "intro\n", reflect.TypeFor[top]())
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\nintro\n\n## top\n\ntop and inner are a JSON layout for TestJSONPage.\n\n| field | type | description |\n|---|---|---|\n" +
		"| `name` | string | `name` is the thing's name, `count` how many. |\n" +
		"| `count` | integer | See `name`. Absent when empty. |\n" +
		"| `when` | string (RFC 3339 time) | `when` is a time. |\n" +
		"| `inner` | object ([inner](#inner)) | See `when`. Absent when empty. |\n" +
		"| `tags` | object: integer by name | See `when`. |\n" +
		"| `list` | array of object ([inner](#inner)) | See `when`. |\n" +
		"\n## inner\n\ninner is nested.\n\n| field | type | description |\n|---|---|---|\n" +
		"| `ok` | boolean | `ok` says so |\n"
	if string(page) != want {
		t.Errorf("page:\n%s\nwant:\n%s", page, want)
	}
}
