package daemon

import (
	"fmt"
)

// Error is a failure to start that one part of the Config caused, for the
// caller to say what to change (the CLI names the flag). A rule of
// Config.Validate broken is one too, and wraps ErrInvalid.
type Error struct {
	Part Part
	// Value is what that part asked for, when it tells the user more than
	// the error does (the user name, the file descriptor); else empty.
	Value string
	Err   error
	// With is the other part a rule between two parts involves (the one
	// Part needs, or the one it cannot be combined with), which Err names
	// in words; 0: none.
	With Part
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

// The parts the rules of Config.Validate name besides those above.
const (
	PartNIC             Part = PartNICGRO + 1 + iota // NIC.Name
	PartTAPName                                      // TAP.Name
	PartTAPNetns                                     // TAP.Netns
	PartTAPQueues                                    // TAP.Queues
	PartTAPMAC                                       // TAP.MAC
	PartPersist                                      // TAP.Persist
	PartTAPNAPI                                      // TAP.NAPI
	PartTAPNAPIThreaded                              // TAP.NAPISettings.Threaded
	PartTAPGROFlush                                  // TAP.NAPISettings.GROFlushTimeout
	PartTAPNAPIDefer                                 // TAP.NAPISettings.DeferHardIRQs
	PartBatch                                        // Workers.Batch
	PartGRO                                          // Workers.GRO
	PartGROWindow                                    // Workers.GROWindow
	PartL2Control                                    // Workers.L2.DropControl
	PartL2ControlAllow                               // Workers.L2.ControlAllow
	PartPoll                                         // Workers.Poll
	PartNICDefer                                     // Workers.KernelPoll.DeferHardIRQs
	PartNICGROFlush                                  // Workers.KernelPoll.GROFlushTimeout
	PartBusyPollTime                                 // Workers.KernelPoll.BusyPoll
	PartNICWait                                      // NIC.Wait
	PartVMPorts                                      // VMPorts.N
	PartVMPortQueues                                 // VMPorts.Queues
	PartHostAddr                                     // Host.Addr
	PartStatsEvery                                   // Log.StatsEvery
	PartABNAPI                                       // AB.NAPI
	PartABDelay                                      // AB.Delay
	PartSpin                                         // Workers.Spin
	PartSplit                                        // Workers.Split
)

var partNames = map[Part]string{
	PartUser: "user", PartPortOwner: "VM port owner", PartCPUs: "worker CPUs", PartReadyFd: "ready fd",
	PartVhostDir: "vhost-user directory", PartHostPort: "host port", PartDHCP: "DHCP", PartTAPNAPICPU: "TAP NAPI CPU",
	PartNICNAPI: "NIC NAPI", PartMetricsAddr: "metrics address", PartTAPMTU: "TAP MTU", PartNICNAPICPU: "NIC NAPI CPU", PartTAPIO: "TAP I/O", PartNICBackend: "NIC backend",
	PartBusyPollCPU: "busy poll CPU", PartAB: "A/B mode", PartNICGRO: "NIC GRO",
	PartNIC: "NIC", PartTAPName: "TAP name", PartTAPNetns: "TAP namespace", PartTAPQueues: "TAP queues", PartTAPMAC: "TAP MAC",
	PartPersist: "persistent TAP", PartTAPNAPI: "TAP NAPI", PartTAPNAPIThreaded: "threaded TAP NAPI", PartTAPGROFlush: "TAP GRO flush timeout",
	PartTAPNAPIDefer: "TAP NAPI hard IRQ deferral", PartBatch: "batch", PartGRO: "GRO", PartGROWindow: "GRO window",
	PartL2Control: "L2 control frames", PartL2ControlAllow: "L2 control exceptions", PartPoll: "poll", PartNICDefer: "NIC NAPI hard IRQ deferral",
	PartNICGROFlush: "NIC GRO flush timeout", PartBusyPollTime: "busy poll time", PartNICWait: "waiting for the NIC", PartVMPorts: "VM ports",
	PartVMPortQueues: "VM port queues", PartHostAddr: "host address", PartStatsEvery: "stats interval",
	PartABNAPI: "A/B arms' NAPI", PartABDelay: "A/B delay", PartSpin: "spin", PartSplit: "split directions",
}

func (p Part) String() string { return partNames[p] }

// fail is an Error about part, nil when err is.
func fail(part Part, value string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Part: part, Value: value, Err: err}
}
