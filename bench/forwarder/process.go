package forwarder

import (
	"context"

	"github.com/tapfwd/tapfwd/internal/testbed"
)

// NaiveCommand is the tapfwd-bench subcommand that runs the naive baseline
// (package naive); StartNaive starts it.
const NaiveCommand = "naive-forwarder"

// Start runs exe (the tapfwd binary) as `tapfwd run` in b.FwdNS with the
// bed's devices (testbed.Bed.ForwarderArgs) plus extra flags (from
// Options.Args, or any others), and waits until the lab answers ping from
// the wire.
func Start(ctx context.Context, b *testbed.Bed, exe string, extra ...string) (*testbed.Process, error) {
	args := append([]string{"run"}, b.ForwarderArgs()...)
	return b.StartForwarder(ctx, "tapfwd", exe, append(args, extra...)...)
}

// StartNaive runs exe (the tapfwd-bench binary) as `tapfwd-bench
// naive-forwarder` (the songgao/water baseline of package naive) the way
// Start runs `tapfwd run`.
func StartNaive(ctx context.Context, b *testbed.Bed, exe string) (*testbed.Process, error) {
	args := append([]string{NaiveCommand}, b.ForwarderArgs()...)
	return b.StartForwarder(ctx, "the naive forwarder", exe, args...)
}
