package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// notifier tells whoever started the daemon how it is doing: a service
// manager over Notify.Socket (READY=1, STOPPING=1, WATCHDOG=1 every half
// Notify.Watchdog), other launchers through Notify.ReadyFd.
type notifier struct {
	log *slog.Logger
	Notify
}

// checkReadyFd makes sure fd is open (and not inherited by children).
func checkReadyFd(fd int) error {
	if fd <= 0 {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fail(PartReadyFd, strconv.Itoa(fd), fmt.Errorf("not an open file descriptor"))
	}
	return nil
}

// send sends state to the service manager, if there is one.
func (n *notifier) send(state string) {
	if n.Socket == "" {
		return
	}
	if err := sdNotify(n.Socket, state); err != nil {
		n.log.Warn("sd_notify", "state", state, "err", err)
	}
}

// sdNotify sends one datagram to the socket (an abstract one when the name
// starts with @, which package net maps).
func sdNotify(socket, state string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// ready says forwarding has started: READY=1 with a status line, and a
// line on ReadyFd, which is then closed.
func (n *notifier) ready(status string) {
	n.send("READY=1\nSTATUS=" + status)
	if n.ReadyFd > 0 {
		f := os.NewFile(uintptr(n.ReadyFd), "ready-fd")
		if _, err := fmt.Fprintf(f, "READY=1 %s\n", status); err != nil {
			n.log.Warn("writing to --ready-fd", "err", err)
		}
		f.Close()
		n.ReadyFd = 0
	}
}

func (n *notifier) stopping() { n.send("STOPPING=1") }

// watchdog sends WATCHDOG=1 every half watchdog interval while no worker
// is stalled, until ctx ends. A stalled worker stops the pings, so the
// service manager restarts a wedged forwarder; it is logged once per
// stall.
func (n *notifier) watchdog(ctx context.Context, stalled func() []string) {
	if n.Watchdog <= 0 || n.Socket == "" {
		return
	}
	t := time.NewTicker(n.Watchdog / 2)
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
		n.send("WATCHDOG=1")
	}
}
