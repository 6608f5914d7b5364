package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// notifier tells whoever started tapfwd how it is doing: systemd through
// the sd_notify protocol when NOTIFY_SOCKET is set (READY=1, STOPPING=1,
// WATCHDOG=1 under WatchdogSec), other launchers through --ready-fd.
type notifier struct {
	log     *slog.Logger
	readyFd int // -1: none
}

// checkReadyFd makes sure fd is open (and not inherited by children).
func checkReadyFd(fd int) error {
	if fd < 0 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fmt.Errorf("--ready-fd %d: not an open file descriptor", fd)
	}
	return nil
}

func (n *notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("sd_notify", "state", state, "err", err)
	}
}

// ready says forwarding has started: READY=1 with a status line, and a
// line on --ready-fd, which is then closed.
func (n *notifier) ready(status string) {
	n.send(sd.SdNotifyReady + "\nSTATUS=" + status)
	if n.readyFd >= 0 {
		f := os.NewFile(uintptr(n.readyFd), "ready-fd")
		if _, err := fmt.Fprintf(f, "READY=1 %s\n", status); err != nil {
			n.log.Warn("writing to --ready-fd", "err", err)
		}
		f.Close()
		n.readyFd = -1
	}
}

func (n *notifier) stopping() { n.send(sd.SdNotifyStopping) }

// watchdog sends WATCHDOG=1 every half watchdog interval (WATCHDOG_USEC)
// while no worker is stalled, until ctx ends. A stalled worker stops the
// pings, so systemd restarts a wedged forwarder; it is logged once per
// stall.
func (n *notifier) watchdog(ctx context.Context, stalled func() []string) {
	every, err := sd.SdWatchdogEnabled(false)
	if err != nil || every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	wasStalled := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s := stalled(); len(s) > 0 {
			if !wasStalled {
				n.log.Error("workers stalled: no longer telling the watchdog", "workers", strings.Join(s, ", "))
			}
			wasStalled = true
			continue
		}
		if wasStalled {
			n.log.Info("workers make progress again")
			wasStalled = false
		}
		n.send(sd.SdNotifyWatchdog)
	}
}
