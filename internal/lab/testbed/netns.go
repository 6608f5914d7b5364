package testbed

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/tapfwd/tapfwd/netns"
)

// Do runs fn on a locked OS thread that has joined namespace ns, and returns
// fn's error (netns.Do). Sockets, TAPs and packet sockets that fn opens
// belong to ns and stay there when used from other goroutines afterwards.
// Goroutines that fn starts run in the caller's namespace, and /sys still
// shows the caller's namespace (only ip netns exec remounts it).
func (b *Bed) Do(ns string, fn func() error) error {
	return netns.Do(ns, fn)
}

// WaitLabReachable pings LabAddr from the wire namespace until it answers,
// timeout passes or ctx ends. It sends ICMP echo requests itself, from a raw
// socket opened in WireNS, so no ping binary is needed.
func (b *Bed) WaitLabReachable(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.PacketConn
	err := b.Do(b.WireNS, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.IPPROTO_ICMP)
		if err != nil {
			return os.NewSyscallError("socket", err)
		}
		f := os.NewFile(uintptr(fd), "icmp")
		defer f.Close()
		conn, err = net.FilePacketConn(f)
		return err
	})
	if err != nil {
		return fmt.Errorf("testbed: ICMP socket in %s: %w", b.WireNS, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	dst := &net.IPAddr{IP: b.LabAddr.Addr().AsSlice()}
	id := uint16(mrand.Uint32())
	buf := make([]byte, 1500)
	var lastErr error
	for seq := uint16(1); ; seq++ {
		if ctx.Err() != nil {
			if lastErr == nil {
				lastErr = errors.New("no echo reply")
			}
			return fmt.Errorf("testbed: %s not reachable from %s within %v: %w", b.LabAddr.Addr(), b.WireNS, timeout, lastErr)
		}
		if _, err := conn.WriteTo(EchoRequest(id, seq), dst); err != nil {
			// ENETUNREACH and friends while links come up: retry.
			lastErr = err
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				lastErr = err
				break
			}
			if a, ok := from.(*net.IPAddr); ok && a.IP.Equal(dst.IP) && isReplyTo(buf[:n], id) {
				return nil
			}
		}
		if ctx.Err() == nil {
			conn.SetDeadline(time.Time{})
		}
	}
}

// isReplyTo reports whether p is an echo reply with identifier id.
func isReplyTo(p []byte, id uint16) bool {
	got, _, ok := EchoReply(p)
	return ok && got == id
}
