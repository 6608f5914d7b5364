package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// LinkWatch tells when one link leaves its namespace: deleted (or its
// driver unregistered it), or moved to another namespace. It listens to
// rtnetlink's link group, so it costs nothing until the kernel says
// something about a link.
type LinkWatch struct {
	index int
	conn  *netlink.Conn
	gone  chan struct{}
	once  sync.Once
	done  chan struct{}
}

// WatchLink watches the link with index in n. A link that is already gone
// is reported at once. n must stay open until Close stops the watch.
func (n *NS) WatchLink(index int) (*LinkWatch, error) {
	cfg := &netlink.Config{Groups: unix.RTMGRP_LINK}
	if n.file != nil {
		cfg.NetNS = int(n.file.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_ROUTE, cfg)
	if err != nil {
		return nil, enterErr("watch link events in "+n.String(), err)
	}
	w := &LinkWatch{index: index, conn: conn, gone: make(chan struct{}), done: make(chan struct{})}
	// Subscribed first, then looked up: a removal in between is not lost.
	if gone, err := n.linkGone(index); err != nil {
		conn.Close()
		return nil, err
	} else if gone {
		w.report()
	}
	go w.run(n)
	return w, nil
}

// Gone is closed once the link has left the namespace.
func (w *LinkWatch) Gone() <-chan struct{} { return w.gone }

// Close stops the watch; Gone stays as it was.
func (w *LinkWatch) Close() error {
	err := w.conn.Close()
	<-w.done
	return err
}

func (w *LinkWatch) report() { w.once.Do(func() { close(w.gone) }) }

// run reads link events until the link is gone or Close. When the kernel
// dropped events (ENOBUFS: the socket's buffer overflowed) it looks the
// link up instead.
func (w *LinkWatch) run(n *NS) {
	defer close(w.done)
	for {
		msgs, err := w.conn.Receive()
		if errors.Is(err, unix.ENOBUFS) {
			if gone, lerr := n.linkGone(w.index); lerr == nil && gone {
				w.report()
				return
			}
			continue
		}
		if err != nil {
			return // closed
		}
		for _, m := range msgs {
			if m.Header.Type == unix.RTM_DELLINK && len(m.Data) >= unix.SizeofIfInfomsg &&
				int(int32(binary.NativeEndian.Uint32(m.Data[4:]))) == w.index {
				w.report()
				return
			}
		}
	}
}

// linkGone looks the link with index up: true when there is none.
func (n *NS) linkGone(index int) (bool, error) {
	_, err := n.execute(unix.RTM_GETLINK, netlink.Request, ifinfomsg(index, 0, 0), nil)
	if errors.Is(err, unix.ENODEV) {
		return true, nil
	}
	if err != nil {
		return false, n.opErr(fmt.Sprintf("look up link %d", index), err)
	}
	return false, nil
}
