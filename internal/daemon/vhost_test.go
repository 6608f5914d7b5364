package daemon

import (
	"testing"

	"github.com/tapfwd/tapfwd/vhostuser"
)

func TestOneLine(t *testing.T) {
	if l := oneLine(vhostuser.LibvirtMemory); l != "<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>" {
		t.Errorf("oneLine: %s", l)
	}
}
