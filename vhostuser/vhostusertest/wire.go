package vhostusertest

import (
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// vhost-user requests, as QEMU numbers them (docs/interop/vhost-user.rst).
const (
	ReqGetFeatures         = 1
	ReqSetFeatures         = 2
	ReqSetOwner            = 3
	ReqResetOwner          = 4
	ReqSetMemTable         = 5
	ReqSetVringNum         = 8
	ReqSetVringAddr        = 9
	ReqSetVringBase        = 10
	ReqGetVringBase        = 11
	ReqSetVringKick        = 12
	ReqSetVringCall        = 13
	ReqSetVringErr         = 14
	ReqGetProtocolFeatures = 15
	ReqSetProtocolFeatures = 16
	ReqGetQueueNum         = 17
	ReqSetVringEnable      = 18
	ReqNetSetMTU           = 20
)

// Header flags.
const (
	FlagVersion   = 0x1
	FlagReply     = 0x4
	FlagNeedReply = 0x8
)

// Feature bits the driver knows.
const (
	featMrgRxbuf         = 15
	featEventIdx         = 29
	featProtocol         = 30
	featVersion1         = 32
	protoMQ              = 0
	protoReplyAck        = 3
	protoNetMTU          = 4
	vringNoFd            = 1 << 8
	regionSize           = 32
	hdrSize              = 12
	replyFlags    uint32 = FlagVersion | FlagReply
)

// Request sends one request with its file descriptors in one sendmsg, as
// QEMU does (hw/virtio/vhost-user.c: vhost_user_write).
func (d *Driver) Request(req, flags uint32, payload []byte, fds ...int) error {
	b := make([]byte, hdrSize+len(payload))
	binary.NativeEndian.PutUint32(b, req)
	binary.NativeEndian.PutUint32(b[4:], flags)
	binary.NativeEndian.PutUint32(b[8:], uint32(len(payload)))
	copy(b[hdrSize:], payload)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := d.conn.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("vhostusertest: send request %d: %w", req, err)
	}
	return nil
}

// Reply reads the reply to req and checks its header as QEMU does
// (vhost_user_read_header: flags exactly version|reply).
func (d *Driver) Reply(req uint32) ([]byte, error) {
	var h [hdrSize]byte
	if _, err := io.ReadFull(d.conn, h[:]); err != nil {
		return nil, fmt.Errorf("vhostusertest: read the reply to %d: %w", req, err)
	}
	got, flags, size := binary.NativeEndian.Uint32(h[:]), binary.NativeEndian.Uint32(h[4:]), binary.NativeEndian.Uint32(h[8:])
	if got != req || flags != replyFlags || size > 4096 {
		return nil, fmt.Errorf("vhostusertest: reply to %d: request %d flags %#x size %d", req, got, flags, size)
	}
	p := make([]byte, size)
	if _, err := io.ReadFull(d.conn, p); err != nil {
		return nil, fmt.Errorf("vhostusertest: read the reply payload to %d: %w", req, err)
	}
	return p, nil
}

func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func state(index, num uint32) []byte {
	return binary.NativeEndian.AppendUint32(binary.NativeEndian.AppendUint32(nil, index), num)
}

// getU64 sends a request whose reply is a u64.
func (d *Driver) getU64(req uint32) (uint64, error) {
	if err := d.Request(req, FlagVersion, nil); err != nil {
		return 0, err
	}
	p, err := d.Reply(req)
	if err != nil {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("vhostusertest: reply to %d has %d bytes", req, len(p))
	}
	return binary.NativeEndian.Uint64(p), nil
}

// set sends a request, waiting for the REPLY_ACK when it was negotiated
// and wait is set.
func (d *Driver) set(req uint32, payload []byte, wait bool, fds ...int) error {
	flags := uint32(FlagVersion)
	ack := wait && d.Proto&(1<<protoReplyAck) != 0
	if ack {
		flags |= FlagNeedReply
	}
	if err := d.Request(req, flags, payload, fds...); err != nil {
		return err
	}
	if !ack {
		return nil
	}
	p, err := d.Reply(req)
	if err != nil {
		return err
	}
	if len(p) != 8 || binary.NativeEndian.Uint64(p) != 0 {
		return fmt.Errorf("vhostusertest: request %d refused: %x", req, p)
	}
	return nil
}
