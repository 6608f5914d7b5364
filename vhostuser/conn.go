package vhostuser

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// acceptLoop serves front-ends one at a time until the port closes.
func (p *Port) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			if p.closing.Load() {
				return
			}
			// EMFILE and friends: wait rather than spin.
			p.plog.Warn("vhost-user accept failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if p.budgetSpent() {
			p.stats.turnedAway.Add(1)
			p.stats.memoryOverBudget.Add(1)
			p.plog.Warn("vhost-user front-end turned away: earlier front-ends left more of their memory "+
				"held by this process than the port's budget", "peer", peerOf(c), "carried_bytes", p.carried.Load())
			_ = c.Close()
			continue
		}
		p.connMu.Lock()
		busy := p.conn != nil || p.closing.Load()
		if !busy {
			p.conn = c
		}
		p.connMu.Unlock()
		if busy {
			p.stats.turnedAway.Add(1)
			p.plog.Warn("vhost-user front-end turned away: another one is connected", "peer", peerOf(c))
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serveConn(c)
	}
}

// peerOf describes the process at the other end (SO_PEERCRED).
func peerOf(c *net.UnixConn) string {
	rc, err := c.SyscallConn()
	if err != nil {
		return "unknown"
	}
	var cred *unix.Ucred
	_ = rc.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cred == nil {
		return "unknown"
	}
	return fmt.Sprintf("pid %d uid %d gid %d", cred.Pid, cred.Uid, cred.Gid)
}

// serveConn handles one front-end's messages until it goes away or breaks
// the protocol, then releases everything it gave.
func (p *Port) serveConn(c *net.UnixConn) {
	defer p.wg.Done()
	p.plog.Info("vhost-user front-end connected", "peer", peerOf(c))
	p.stats.connects.Add(1)
	p.overBudget.Store(false)
	p.mu.Lock()
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { p.peer = peerOfConn(int(fd)) })
	}
	p.updateState()
	p.mu.Unlock()
	p.emit(Event{Kind: EventConnected})
	err := p.serve(c)
	if err == io.EOF || p.closing.Load() {
		err = nil
	}
	switch {
	case p.overBudget.Load():
		// sent away for its memory, and logged then (checkBudget)
	case err == nil:
		p.plog.Info("vhost-user front-end disconnected")
	case errors.Is(err, ErrProtocol):
		p.stats.protocolErrors.Add(1)
		p.plog.Error("vhost-user front-end sent away", "err", err)
	default:
		p.plog.Warn("vhost-user front-end lost", "err", err)
	}
	_ = c.Close()
	p.mu.Lock()
	p.teardown()
	p.connMu.Lock()
	p.conn = nil
	p.connMu.Unlock()
	p.updateState()
	p.mu.Unlock()
	p.stats.disconnects.Add(1)
	p.wake()
	p.emit(Event{Kind: EventDisconnected, Err: err})
}

// wireMsg is one request as read from the socket.
type wireMsg struct {
	hdr     [hdrSize]byte
	payload [maxPayload]byte
	size    int
	fds     []int
	fdBuf   [maxFds]int
}

// serve reads, checks and handles requests until an error.
func (p *Port) serve(c *net.UnixConn) error {
	var in wireMsg
	oob := make([]byte, unix.CmsgSpace(maxFds*4))
	for {
		if err := readMsg(c, &in, oob); err != nil {
			return err
		}
		m, err := parseMessage(in.hdr[:], in.payload[:in.size], len(in.fds), len(p.rings))
		if err != nil {
			closeFds(in.fds)
			return err
		}
		p.log.Debug("vhost-user request", "request", reqName(m.req), "need_reply", m.needReply, "fds", len(in.fds))
		out, status, err := p.handle(&m, in.fds)
		if err != nil {
			return err
		}
		if out == nil && m.needReply {
			// REPLY_ACK: 0 for success (QEMU: process_message_reply).
			var b [sizeU64]byte
			binary.NativeEndian.PutUint64(b[:], status)
			out = putReply(p.reply[:], m.req, b[:])
		}
		if out != nil {
			if _, err := c.Write(out); err != nil {
				return fmt.Errorf("reply to %s: %w", reqName(m.req), err)
			}
		}
	}
}

// readMsg reads one request and the file descriptors sent with it. It
// returns io.EOF if the front-end closed between requests. On error it
// closes every fd it received.
func readMsg(c *net.UnixConn, m *wireMsg, oob []byte) (err error) {
	m.fds, m.size = m.fdBuf[:0], 0
	defer func() {
		if err != nil {
			closeFds(m.fds)
			m.fds = m.fdBuf[:0]
		}
	}()
	for got := 0; got < hdrSize; {
		n, oobn, flags, _, err := c.ReadMsgUnix(m.hdr[got:], oob)
		if oobn > 0 {
			if ferr := m.takeFds(oob[:oobn]); ferr != nil {
				return ferr
			}
		}
		switch {
		case flags&unix.MSG_CTRUNC != 0:
			return fmt.Errorf("%w: more than %d file descriptors with one message", ErrProtocol, maxFds)
		case err != nil && n == 0 && errors.Is(err, io.EOF):
			if got == 0 {
				return io.EOF
			}
			return fmt.Errorf("read a message header: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return fmt.Errorf("read a message header: %w", err)
		case n == 0 && got == 0:
			return io.EOF
		case n == 0:
			return fmt.Errorf("read a message header: %w", io.ErrUnexpectedEOF)
		}
		got += n
	}
	req, _, size, err := parseHeader(m.hdr[:])
	if err != nil {
		return err
	}
	// File descriptors come with the header (QEMU sends each message with
	// one sendmsg); any sent with payload bytes are closed by the kernel
	// for a read without room for them.
	if _, err := io.ReadFull(c, m.payload[:size]); err != nil {
		return fmt.Errorf("read the payload of %s: %w", reqName(req), err)
	}
	m.size = int(size)
	return nil
}

// takeFds collects the SCM_RIGHTS fds of a control message.
func (m *wireMsg) takeFds(oob []byte) error {
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("%w: control message: %w", ErrProtocol, err)
	}
	var tooMany bool
	for i := range cmsgs {
		fds, err := unix.ParseUnixRights(&cmsgs[i])
		if err != nil {
			continue // not SCM_RIGHTS
		}
		for _, fd := range fds {
			if len(m.fds) == maxFds {
				_ = unix.Close(fd)
				tooMany = true
				continue
			}
			m.fds = append(m.fds, fd)
		}
	}
	if tooMany {
		return fmt.Errorf("%w: more than %d file descriptors with one message", ErrProtocol, maxFds)
	}
	return nil
}
