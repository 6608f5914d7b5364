package cliflag

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/tapfwd/tapfwd/internal/base/buildinfo"
)

// Version is the command `prog version [--json]` (and prog --version):
// this binary's version, VCS revision and Go version.
func Version(prog string, args []string, stdout io.Writer) error {
	fs := NewFlagSet(prog, "version", "version [--json]", stdout)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := Parse(fs, args); err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(buildinfo.Get())
	}
	_, err := fmt.Fprintln(stdout, prog, buildinfo.Get())
	return err
}
