package traffic

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// auxTCI is the VLAN TCI in a PACKET_AUXDATA control message, 0 for none.
func auxTCI(oob []byte) uint16 {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA && len(m.Data) >= int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
			a := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
			if a.Status&unix.TP_STATUS_VLAN_VALID != 0 {
				return a.Vlan_tci
			}
		}
	}
	return 0
}
