package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.GoVersion != runtime.Version() || i.Version == "" {
		t.Errorf("Get() = %+v", i)
	}
	s := Info{Version: "v1.2.3", Revision: "0123456789abcdef", Modified: true, GoVersion: "go1.26"}.String()
	if s != "v1.2.3 (revision 0123456789ab+changes, go1.26)" {
		t.Errorf("String() = %q", s)
	}
	if !strings.Contains(Info{Version: "(devel)"}.String(), "revision unknown") {
		t.Error("no revision")
	}
}
