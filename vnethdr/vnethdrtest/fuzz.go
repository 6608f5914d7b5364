package vnethdrtest

import "testing"

// hdrSize is sizeof(struct virtio_net_hdr): what a header's Encode writes
// and its Decode reads.
const hdrSize = 10

// The fuzz targets over a vnet header and a frame take the header as
// bytes and the header type of the package under test (H, which this
// package cannot import) to encode and decode it.

// AddHdr adds the seed h, encoded by H's Encode, and frame to f: a seed
// for a target that FuzzHdr runs.
func AddHdr[H any, P interface {
	*H
	Encode([]byte)
}](f *testing.F, h H, frame []byte) {
	b := make([]byte, hdrSize)
	P(&h).Encode(b)
	f.Add(b, frame)
}

// FuzzHdr fuzzes fn with every header input that H's Decode takes and any
// frame.
func FuzzHdr[H any, P interface {
	*H
	Decode([]byte) error
}](f *testing.F, fn func(t *testing.T, h H, frame []byte)) {
	f.Fuzz(func(t *testing.T, hdr, frame []byte) {
		var h H
		if P(&h).Decode(hdr) != nil {
			return
		}
		fn(t, h, frame)
	})
}
