package daemon

import (
	"reflect"
	"testing"

	"github.com/tapfwd/tapfwd/internal/refdoc"
)

// TestReference: docs/reference/status.md is /status's JSON as the Go
// types say it: every field's name, type and doc comment, from Status
// down. TAPFWD_REFERENCE=update (make reference) writes the page.
func TestReference(t *testing.T) {
	page, err := refdoc.JSONPage("/status", statusIntro, reflect.TypeFor[Status]())
	if err != nil {
		t.Fatal(err)
	}
	if err := refdoc.Check("status.md", page); err != nil {
		t.Fatal(err)
	}
}

const statusIntro = "The JSON a running tapfwd serves at `/status` on its metrics listener\n" +
	"(`--metrics-addr`), which `tapfwd status` prints for a person and\n" +
	"`tapfwd status --json` as served. `schema` is `" + StatusSchema + "`: a change that\n" +
	"breaks a reader gets a new one. The tables are the Go types\n" +
	"(`internal/daemon.Status` and the types it holds) and their doc\n" +
	"comments, written by `make reference`: do not edit this page, a test\n" +
	"fails when it is not what the code says.\n"
