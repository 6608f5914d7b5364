package testbed

import (
	"context"
	"encoding/binary"
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
		if _, err := conn.WriteTo(echoRequest(id, seq), dst); err != nil {
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
			if a, ok := from.(*net.IPAddr); ok && a.IP.Equal(dst.IP) && isEchoReply(buf[:n], id) {
				return nil
			}
		}
		if ctx.Err() == nil {
			conn.SetDeadline(time.Time{})
		}
	}
}

// echoRequest builds an ICMPv4 echo request (RFC 792).
func echoRequest(id, seq uint16) []byte {
	m := make([]byte, 8, 8+16)
	m[0] = 8 // echo request
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	m = append(m, "tapfwd testbed.."...)
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return m
}

// isEchoReply reports whether p, an ICMPv4 message possibly preceded by its
// IPv4 header, is an echo reply with identifier id.
func isEchoReply(p []byte, id uint16) bool {
	if len(p) >= 20 && p[0]>>4 == 4 {
		p = p[int(p[0]&0x0f)*4:]
	}
	return len(p) >= 8 && p[0] == 0 && p[1] == 0 && binary.BigEndian.Uint16(p[4:]) == id
}

func checksum(p []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(p); i += 2 {
		s += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	if len(p)%2 == 1 {
		s += uint32(p[len(p)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
