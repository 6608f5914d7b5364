// Package buildinfo says which tapfwd this is: its release version, the
// VCS revision it was built from, and the Go version, from the binary
// itself.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version is tapfwd's release version, the one place it is written: the
// first release heading of CHANGELOG.md must name it (a test checks).
const Version = "0.1.0"

// revision is `git describe --always --dirty` at build time, stamped by
// make build (-ldflags -X), which also works where Go records no VCS
// information (GOFLAGS=-buildvcs=false, a copy of the tree without .git
// at build time); empty in a plain go build.
var revision string

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`    // the release (CHANGELOG.md's latest)
	Revision  string `json:"revision"`   // VCS revision, "" when not recorded
	Modified  bool   `json:"modified"`   // built from a checkout with changes
	GoVersion string `json:"go_version"` // the Go release it was built with
}

// Get is the release (Version) and the build information embedded in
// the binary: the revision make build stamped, else the one Go recorded.
// The module version Go records is not used: "(devel)" for every build
// from a checkout.
func Get() Info {
	i := get(revision)
	i.Version = Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.GoVersion = bi.GoVersion
		if revision == "" {
			i.Revision, i.Modified = vcs(bi.Settings)
		}
	}
	return i
}

// get is the revision make build stamped: "abc1234" or "v1.2-3-gabc1234",
// "-dirty" when built with changes.
func get(stamped string) Info {
	rev, dirty := strings.CutSuffix(stamped, "-dirty")
	return Info{Revision: rev, Modified: dirty}
}

func vcs(settings []debug.BuildSetting) (rev string, modified bool) {
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return rev, modified
}

// String is "VERSION (revision REV[+changes], GOVERSION)", a full commit
// hash shortened to 12 digits.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	if len(rev) == 40 && strings.Trim(rev, "0123456789abcdef") == "" {
		rev = rev[:12]
	}
	if i.Modified {
		rev += "+changes"
	}
	return i.Version + " (revision " + rev + ", " + i.GoVersion + ")"
}
