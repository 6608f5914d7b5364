package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/tapfwd/tapfwd/internal/daemon"
)

func cmdStatus(args []string, stdout io.Writer) error {
	fs := newFlagSet("status", "status [--addr HOST:PORT] [--json]", stdout)
	addr := fs.String("addr", daemon.DefaultMetricsAddr, "the running tapfwd's --metrics-addr (run this in the network namespace tapfwd runs in)")
	asJSON := fs.Bool("json", false, "print the JSON tapfwd serves at /status")
	if err := parse(fs, args); err != nil {
		return err
	}
	st, raw, err := daemon.FetchStatus(*addr)
	switch {
	case errors.Is(err, daemon.ErrNoStatus):
		return fmt.Errorf("status: %w (is it running, with --metrics-addr %s, in this network namespace?)", err, *addr)
	case err != nil:
		return fmt.Errorf("status: %w", err)
	case *asJSON:
		_, err := stdout.Write(raw)
		return err
	}
	return st.WriteText(stdout)
}
