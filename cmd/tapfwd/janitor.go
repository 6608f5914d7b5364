package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vmport"
)

// A process that drops privileges (--user) can no longer delete the VM
// ports it made or their device nodes under root's /dev/tapfwd, nor its
// vhost-user sockets in a directory root owns. Before it drops them it
// starts a janitor: the same binary, still privileged, that
// reads the ports from a pipe and removes them once the pipe closes, which
// happens when tapfwd ends however it ends (exit, signal, SIGKILL). The
// janitor does nothing else and takes no other input.

// janitorJob is what the janitor removes.
type janitorJob struct {
	Ports []vmport.Port `json:"ports,omitempty"`
	// Sockets are removed only while they are the files the ports made
	// (a restarted tapfwd may have put its own there already).
	Sockets []vhostuser.SocketFile `json:"sockets,omitempty"`
}

// startJanitor starts the janitor for job. The returned file is the
// pipe's write end: keep it open for as long as the ports are in use.
func startJanitor(job janitorJob) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe", "janitor")
	cmd.Stdin = r
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group: a Ctrl-C to tapfwd's does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the janitor: %w", err)
	}
	go cmd.Wait() // reaps it if tapfwd outlives it
	if err := json.NewEncoder(w).Encode(job); err != nil {
		w.Close()
		return nil, fmt.Errorf("telling the janitor: %w", err)
	}
	return w, nil
}

// cmdJanitor is `tapfwd janitor` (not listed): it reads its job from
// stdin, waits until stdin closes, and removes the ports (those still
// there with the same ifindex), their device nodes and the sockets.
func cmdJanitor(stdin io.Reader, stderr io.Writer) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var job janitorJob
	if err := json.NewDecoder(stdin).Decode(&job); err != nil {
		return fmt.Errorf("janitor: reading the ports: %w", err)
	}
	io.Copy(io.Discard, stdin) // until tapfwd is gone
	var errs []error
	if len(job.Ports) > 0 {
		errs = append(errs, vmport.Remove(job.Ports))
	}
	for _, f := range job.Sockets {
		errs = append(errs, vhostuser.RemoveSocketFile(f))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("janitor: %w", err)
	}
	return nil
}
