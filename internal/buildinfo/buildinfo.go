// Package buildinfo says which tapfwd this is: the module version, the VCS
// revision it was built from, and the Go version, from the binary itself.
package buildinfo

import "runtime/debug"

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`  // "(devel)" for a build from a checkout
	Revision  string `json:"revision"` // VCS revision, "" when not recorded
	Modified  bool   `json:"modified"` // built from a checkout with changes
	GoVersion string `json:"go_version"`
}

// Get reads the build information embedded in the binary.
func Get() Info {
	var i Info
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	i.Version, i.GoVersion = bi.Main.Version, bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is "VERSION (revision REV[+changes], GOVERSION)".
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if i.Modified {
		rev += "+changes"
	}
	return i.Version + " (revision " + rev + ", " + i.GoVersion + ")"
}
