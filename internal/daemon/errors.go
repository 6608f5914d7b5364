package daemon

import (
	"fmt"
)

// Error is a failure to start that one part of the Config caused, for the
// caller to say what to change (the CLI names the flag).
type Error struct {
	Part Part
	// Value is what that part asked for, when it tells the user more than
	// the error does (the user name, the file descriptor); else empty.
	Value string
	Err   error
}

func (e *Error) Error() string {
	if e.Value != "" {
		return fmt.Sprintf("%s %s: %v", e.Part, e.Value, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Part, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Part names a part of the Config.
type Part int

// The parts an Error can be about.
const (
	PartUser        Part = iota + 1 // Privileges.User
	PartPortOwner                   // VMPorts.Owner
	PartCPUs                        // Workers.CPUs
	PartReadyFd                     // Notify.ReadyFd
	PartVhostDir                    // VMPorts.VhostDir
	PartHostPort                    // Host
	PartDHCP                        // Host.DHCP
	PartTAPNAPICPU                  // NAPI.TAPCPU
	PartNICNAPI                     // NAPI.NICMode
	PartMetricsAddr                 // Metrics.Addr
	PartTAPMTU                      // TAP.MTU
	PartNICNAPICPU                  // NAPI.NICCPU
	PartTAPIO                       // Workers.TAPIO
	PartNICBackend                  // NIC.Backend
	PartBusyPollCPU                 // Workers.KernelPoll.CPU
	PartAB                          // AB
	PartNICGRO                      // NIC.GRO
)

var partNames = map[Part]string{
	PartUser: "user", PartPortOwner: "VM port owner", PartCPUs: "worker CPUs", PartReadyFd: "ready fd",
	PartVhostDir: "vhost-user directory", PartHostPort: "host port", PartDHCP: "DHCP", PartTAPNAPICPU: "TAP NAPI CPU",
	PartNICNAPI: "NIC NAPI", PartMetricsAddr: "metrics address", PartTAPMTU: "TAP MTU", PartNICNAPICPU: "NIC NAPI CPU", PartTAPIO: "TAP I/O", PartNICBackend: "NIC backend",
	PartBusyPollCPU: "busy poll CPU", PartAB: "A/B mode", PartNICGRO: "NIC GRO",
}

func (p Part) String() string { return partNames[p] }

// fail is an Error about part, nil when err is.
func fail(part Part, value string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Part: part, Value: value, Err: err}
}
