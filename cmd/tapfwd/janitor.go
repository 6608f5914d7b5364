package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/tapfwd/tapfwd/vmport"
)

// A process that drops privileges (--user) can no longer delete the VM
// ports it made or their device nodes under root's /dev/tapfwd. Before it
// drops them it starts a janitor: the same binary, still privileged, that
// reads the ports from a pipe and removes them once the pipe closes, which
// happens when tapfwd ends however it ends (exit, signal, SIGKILL). The
// janitor does nothing else and takes no other input.

// startJanitor starts the janitor for ports. The returned file is the
// pipe's write end: keep it open for as long as the ports are in use.
func startJanitor(ports []vmport.Port) (*os.File, error) {
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
	if err := json.NewEncoder(w).Encode(ports); err != nil {
		w.Close()
		return nil, fmt.Errorf("telling the janitor: %w", err)
	}
	return w, nil
}

// cmdJanitor is `tapfwd janitor` (not listed): it reads the ports from
// stdin, waits until stdin closes, and removes the ports (those still
// there with the same ifindex) and their device nodes.
func cmdJanitor(stdin io.Reader, stderr io.Writer) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var ports []vmport.Port
	if err := json.NewDecoder(stdin).Decode(&ports); err != nil {
		return fmt.Errorf("janitor: reading the ports: %w", err)
	}
	io.Copy(io.Discard, stdin) // until tapfwd is gone
	if err := vmport.Remove(ports); err != nil {
		return fmt.Errorf("janitor: %w", err)
	}
	return nil
}
