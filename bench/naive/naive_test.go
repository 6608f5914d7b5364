package naive

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

func TestETHPAllNetworkOrder(t *testing.T) {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], unix.ETH_P_ALL)
	if got := binary.NativeEndian.Uint16(b[:]); got != ethPAllNet {
		t.Errorf("ETH_P_ALL in network byte order reads %#04x on this host, ethPAllNet is %#04x", got, ethPAllNet)
	}
}
