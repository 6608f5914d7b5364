package eventfd

import (
	"testing"
	"unsafe"
)

// The request's layout is the kernel's: 64 bytes, the fields at their
// offsets in struct iocb.
func TestIocbLayout(t *testing.T) {
	var cb iocb
	if s := unsafe.Sizeof(cb); s != 64 {
		t.Errorf("iocb has %d bytes, want 64", s)
	}
	for name, off := range map[string][2]uintptr{
		"aio_lio_opcode": {unsafe.Offsetof(cb.opcode), 16}, "aio_fildes": {unsafe.Offsetof(cb.fildes), 20},
		"aio_buf": {unsafe.Offsetof(cb.buf), 24}, "aio_flags": {unsafe.Offsetof(cb.flags), 56},
		"aio_resfd": {unsafe.Offsetof(cb.resfd), 60},
	} {
		if off[0] != off[1] {
			t.Errorf("%s at %d, want %d", name, off[0], off[1])
		}
	}
	if s := unsafe.Sizeof(ioEvent{}); s != 32 {
		t.Errorf("io_event has %d bytes, want 32", s)
	}
}
