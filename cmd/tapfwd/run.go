package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/coreos/go-systemd/v22/activation"
	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/tapfwd/tapfwd/internal/daemon"
)

// cmdRun is `tapfwd run`: the daemon, until SIGINT or SIGTERM.
func cmdRun(args []string, stdout, stderr io.Writer) error {
	c, err := parseRun(args, stdout, stderr)
	if err != nil {
		return err
	}
	// A service manager says where it listens in the environment.
	c.Notify.Socket = os.Getenv("NOTIFY_SOCKET")
	if every, err := sd.SdWatchdogEnabled(false); err == nil {
		c.Notify.Watchdog = every
	}
	// Socket activation: a listener the service manager passed (bound in its
	// namespace) serves the metrics; Listeners unsets LISTEN_FDS.
	if lns, _ := activation.Listeners(); len(lns) > 1 || len(lns) == 1 && lns[0] == nil {
		return fmt.Errorf("the service manager passed %d sockets (LISTEN_FDS), want one: a listening stream socket for the metrics", len(lns))
	} else if len(lns) == 1 {
		c.Metrics = &daemon.Metrics{Listener: lns[0], PProf: c.Metrics != nil && c.Metrics.PProf}
	}
	d, err := daemon.Open(*c)
	if err != nil {
		return explainRun(err, c)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopOnSignal(ctx, cancel, c.Log.Logger)
	return d.Run(ctx)
}

// stopOnSignal cancels ctx on the first SIGINT or SIGTERM and exits at
// once on the second.
func stopOnSignal(ctx context.Context, cancel func(), log *slog.Logger) {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		defer signal.Stop(sigc)
		select {
		case s := <-sigc:
			log.Info("stopping", "signal", s.String())
			cancel()
		case <-ctx.Done():
			return
		}
		s := <-sigc
		log.Error("second signal: exiting now", "signal", s.String())
		os.Exit(1)
	}()
}
