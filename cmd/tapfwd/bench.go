package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/bench"
	"github.com/tapfwd/tapfwd/bench/testbed"
)

func cmdBench(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "throughput" {
		fmt.Fprintln(stderr, "Usage: tapfwd bench throughput [flags]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return errUsage
	}
	fs := newFlagSet("bench throughput", "bench throughput [flags]", stderr)
	dur := fs.Duration("duration", 5*time.Second, "length of each iperf3 run (e.g. 5s)")
	reps := fs.Int("reps", 3, "repetitions per configuration and direction, interleaved")
	streams := fs.Int("streams", 1, "parallel TCP streams (iperf3 -P)")
	quick := fs.Bool("quick", false, "one 2 s repetition each: a smoke test, not a measurement")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *quick {
		*dur, *reps = 2*time.Second, 1
	}
	if err := testbed.Available(); err != nil {
		return fmt.Errorf("bench needs root: %w", err)
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		return errors.New("iperf3 not found: install it with apt-get install iperf3")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Throughput(ctx, bench.ThroughputOptions{
		Exe: exe, Duration: *dur, Reps: *reps, Streams: *streams, Progress: stderr,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		e := json.NewEncoder(stdout)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	}
	rep.WriteTable(stdout)
	return nil
}
