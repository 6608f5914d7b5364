package keeper

import (
	"errors"
	"io"

	"github.com/tapfwd/tapfwd/internal/tapport"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// A process that drops privileges can no longer delete the VM ports it
// made or their device nodes under root's /dev/tapfwd, nor its vhost-user
// sockets in a directory root owns: before it drops them it starts a
// janitor, which removes them once tapfwd has ended.

// Janitor is what a janitor removes.
type Janitor struct {
	// Ports are removed with their device nodes while they are still
	// there with the same ifindex.
	Ports []tapport.Port `json:"ports,omitempty"`
	// Sockets are removed only while they are the files the ports made
	// (a restarted tapfwd may have put its own there already).
	Sockets []vhostuser.SocketFile `json:"sockets,omitempty"`
}

// StartJanitor starts the janitor for j. Stop it when the ports and the
// sockets are no longer in use: it removes them.
func StartJanitor(j Janitor) (*Keeper, error) {
	return start("janitor", JanitorCommand, j, nil, "")
}

// ServeJanitor is the janitor's side: `tapfwd janitor`.
func ServeJanitor(stdin io.Reader, stdout, stderr io.Writer) error {
	return serve("janitor", &Janitor{}, stdin, stdout, stderr)
}

func (j *Janitor) begin(io.Writer) (string, error) { return "", nil }

func (j *Janitor) done() <-chan struct{} { return nil }

func (j *Janitor) end(io.Writer) error {
	var errs []error
	if len(j.Ports) > 0 {
		errs = append(errs, tapport.Remove(j.Ports))
	}
	for _, f := range j.Sockets {
		errs = append(errs, vhostuser.RemoveSocketFile(f))
	}
	return errors.Join(errs...)
}
