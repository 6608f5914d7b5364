package afxdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Mode is how the XDP program is attached.
type Mode int

const (
	// ModeAuto attaches in native mode and, where the driver refuses it,
	// in generic mode.
	ModeAuto Mode = iota
	// ModeNative runs the program in the driver (XDP_FLAGS_DRV_MODE): veth
	// has it; frames reach the socket before any skb is built for them
	// (veth: from its NAPI poll).
	ModeNative
	// ModeGeneric runs it on the skb in the receive path
	// (XDP_FLAGS_SKB_MODE): every driver, slower.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return "auto"
}

// MarshalText and UnmarshalText make a Mode a flag value: auto, native or
// generic.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *Mode) UnmarshalText(t []byte) error {
	for _, c := range []Mode{ModeAuto, ModeNative, ModeGeneric} {
		if c.String() == string(t) {
			*m = c
			return nil
		}
	}
	return fmt.Errorf("want auto, native or generic, got %q", t)
}

// xdpMdRxQueueIndex is offsetof(struct xdp_md, rx_queue_index)
// (include/uapi/linux/bpf.h: data, data_end, data_meta, ingress_ifindex,
// rx_queue_index).
const xdpMdRxQueueIndex = 16

// Program is the XDP program and its XSKMAP, attached to one device: frames
// received on queue i go to the socket in slot i, or up the host's stack
// (XDP_PASS) while the slot is empty.
//
// It is built with cilium/ebpf's asm package rather than compiled from C
// (bpf2go): five instructions need no clang at build time, and no
// generated object has to be kept in step with its source.
type Program struct {
	xsks *ebpf.Map
	prog *ebpf.Program
	lnk  link.Link
	mode Mode
	frag bool
}

// LoadProgram loads the program with an XSKMAP of slots entries and
// attaches it to ifindex as a bpf_link, so that it leaves the device when
// the last descriptor of the link closes: at Close, or when the process
// exits however it exits (SIGKILL included). With frags the program is
// loaded as xdp.frags (BPF_F_XDP_HAS_FRAGS, 5.18+): it takes multi-buffer
// frames, which a veth needs to allow XDP at all once its peer's MTU is
// past a page.
func LoadProgram(ifindex, slots int, mode Mode, frags bool) (_ *Program, err error) {
	p := &Program{mode: mode, frag: frags}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(slots)})
	if err != nil {
		return nil, opError("create XSKMAP", "", err, nil)
	}
	spec := &ebpf.ProgramSpec{
		Name: "tapfwd_xsk",
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, xdpMdRxQueueIndex, asm.Word), // r2 = ctx->rx_queue_index
			asm.LoadMapPtr(asm.R1, p.xsks.FD()),
			asm.Mov.Imm(asm.R3, 2), // XDP_PASS when the slot is empty
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
		License: "GPL",
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	if p.prog, err = ebpf.NewProgram(spec); err != nil {
		return nil, opError("load XDP program", "", err, nil)
	}
	if err := p.attach(ifindex); err != nil {
		return nil, err
	}
	return p, nil
}

// attach links the program in p.mode; auto tries native, then generic.
func (p *Program) attach(ifindex int) error {
	try := []Mode{p.mode}
	if p.mode == ModeAuto {
		try = []Mode{ModeNative, ModeGeneric}
	}
	var err error
	for _, m := range try {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		if p.lnk, err = link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags}); err == nil {
			p.mode = m
			return nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
			break // a mode change does not help
		}
	}
	return opError(fmt.Sprintf("attach XDP (%s) to ifindex %d", p.mode, ifindex), "", err, map[unix.Errno]error{
		unix.EOPNOTSUPP: ErrMode, unix.EINVAL: ErrMode,
		unix.EBUSY: ErrXDPBusy, unix.EEXIST: ErrXDPBusy,
		unix.ERANGE: ErrMTU, unix.ENOSPC: ErrPeerQueues,
		unix.ENODEV: ErrNoDevice,
	})
}

// Mode is the mode the program runs in (never ModeAuto once attached).
func (p *Program) Mode() Mode { return p.mode }

// Frags reports whether the program takes multi-buffer frames.
func (p *Program) Frags() bool { return p.frag }

// Insert puts s in slot s.Queue(): frames of that queue go to it.
func (p *Program) Insert(s *Socket) error {
	if err := p.xsks.Put(uint32(s.queueID), uint32(s.fd)); err != nil {
		return opError(fmt.Sprintf("XSKMAP slot %d", s.queueID), "", err, nil)
	}
	return nil
}

// ID is the program's kernel id (what `ip link` shows as prog/xdp id).
func (p *Program) ID() (ebpf.ProgramID, error) {
	info, err := p.prog.Info()
	if err != nil {
		return 0, err
	}
	id, _ := info.ID()
	return id, nil
}

// Close detaches the program and frees it and the map, or what of them a
// failed LoadProgram made: cilium/ebpf's Close takes a nil program or map.
func (p *Program) Close() error {
	var err error
	if p.lnk != nil {
		err = p.lnk.Close()
	}
	return errors.Join(err, p.prog.Close(), p.xsks.Close())
}
