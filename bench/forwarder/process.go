package forwarder

import (
	"context"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// NaiveCommand is the tapfwd-bench subcommand that runs the naive baseline
// (package naive); StartNaive starts it.
const NaiveCommand = "naive-forwarder"

// Start runs exe (the tapfwd binary) as `tapfwd run` with o's flags on
// bed b (testbed.Bed.StartTapfwd), and waits until the lab answers ping
// from the wire.
func Start(ctx context.Context, b *testbed.Bed, exe string, o Options) (*testbed.Process, error) {
	return b.StartTapfwd(ctx, exe, o.Args()...)
}

// StartNaive runs exe (the tapfwd-bench binary) as `tapfwd-bench
// naive-forwarder` (the songgao/water baseline of package naive) the way
// Start runs `tapfwd run`.
func StartNaive(ctx context.Context, b *testbed.Bed, exe string) (*testbed.Process, error) {
	args := append([]string{NaiveCommand}, b.ForwarderArgs()...)
	return b.StartForwarder(ctx, "the naive forwarder", exe, args...)
}
