package refdoc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// UpdateEnv is the environment variable that, set to "update", makes the
// checks write the pages rather than compare them.
const UpdateEnv = "TAPFWD_REFERENCE"

// Dir is where the pages are, from the module's root.
const Dir = "docs/reference"

// ErrStale is the error of a page that differs from what the code makes.
var ErrStale = errors.New("stale")

// Root is the module's root: the nearest directory above the working
// directory with a go.mod (a test runs in its package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("refdoc: no go.mod above the working directory")
		}
		dir = up
	}
}

func updating() bool { return os.Getenv(UpdateEnv) == "update" }

// Check compares page (a file name under Dir) with want; when updating,
// it writes want there instead. A page that differs is ErrStale, said as
// "docs/reference/PAGE is stale: run make reference".
func Check(page string, want []byte) error {
	return edit(page, func([]byte) []byte { return want })
}

// edit compares page with what render makes of its text, or, when
// updating, writes that, under a lock on the page (two tests may write
// parts of one page at once).
func edit(page string, render func(old []byte) []byte) error {
	root, err := Root()
	if err != nil {
		return err
	}
	path := filepath.Join(root, Dir, page)
	if !updating() {
		old, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if want := render(old); !bytes.Equal(old, want) {
			return fmt.Errorf("%s/%s is %w: run make reference\n%s", Dir, page, ErrStale, firstDiff(old, want))
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return os.NewSyscallError("flock", err)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	want := render(old)
	if bytes.Equal(old, want) {
		return nil
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(want, 0)
	return err
}

// Sections is a page made of a head and sections that different tests
// render, each between marker lines.
type Sections struct {
	Page  string   // the file name under Dir
	Head  string   // the text before the sections
	Names []string // the sections, in order
}

func begin(name string) string { return "<!-- " + name + ": begin (generated) -->\n" }
func end(name string) string   { return "<!-- " + name + ": end -->\n" }

// Check is the package's Check for section name alone: the page is
// stale when its head, or this section, differs from what is rendered
// now (body); the other sections are taken as they are.
func (s Sections) Check(name string, body []byte) error {
	found := false
	for _, n := range s.Names {
		found = found || n == name
	}
	if !found {
		return fmt.Errorf("refdoc: %s has no section %q", s.Page, name)
	}
	return edit(s.Page, func(old []byte) []byte {
		var b strings.Builder
		b.WriteString(s.Head)
		for _, n := range s.Names {
			part := section(string(old), n)
			if n == name {
				part = string(body)
			}
			b.WriteString("\n" + begin(n) + part + end(n))
		}
		return []byte(b.String())
	})
}

// section is the text of section name in page, "" when it has none.
func section(page, name string) string {
	_, rest, ok := strings.Cut(page, begin(name))
	if !ok {
		return ""
	}
	body, _, ok := strings.Cut(rest, end(name))
	if !ok {
		return ""
	}
	return body
}

// firstDiff says where got and want first differ, by line.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; ; i++ {
		switch {
		case i >= len(g):
			return fmt.Sprintf("line %d: the page ends; the code has %q", i+1, w[i])
		case i >= len(w):
			return fmt.Sprintf("line %d: the code's page ends; the page has %q", i+1, g[i])
		case g[i] != w[i]:
			return fmt.Sprintf("line %d: the page has %q\nthe code makes %q", i+1, g[i], w[i])
		}
	}
}
