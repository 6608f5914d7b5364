package vnethdrtest

// CsumMode is how a test frame's L4 checksum arrives with its header: in
// full with no flag, in full with VIRTIO_NET_HDR_F_DATA_VALID, or as the
// pseudo-header sum with VIRTIO_NET_HDR_F_NEEDS_CSUM.
type CsumMode uint8

const (
	CsumFull     CsumMode = iota // no flag: a full checksum the receiver has to verify
	CsumValid                    // FlagDataValid, full checksum
	CsumPartial                  // FlagNeedsCsum, pseudo-header sum in the field
	NumCsumModes                 // how many modes there are
)

func (m CsumMode) String() string {
	return [...]string{"full", "valid", "partial"}[m]
}

// AllModes gives every frame of a run mode m.
func AllModes(m CsumMode) func(int) CsumMode { return func(int) CsumMode { return m } }

// MixedModes gives the frames of a run different checksum states, in
// turn.
func MixedModes(i int) CsumMode { return CsumMode(i % int(NumCsumModes)) }
