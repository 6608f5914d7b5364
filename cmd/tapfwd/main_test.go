package main

import (
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
)

func TestCLIUsageErrors(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{nil, 2, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"run"}, 2, "--nic is required"},
		{[]string{"run", "--nic", "x", "--napi", "maybe"}, 1, "--napi: want auto, on or off"},
		{[]string{"run", "--nic", "x", "--queues", "0"}, 1, "--queues 0: want 1 to 256"},
		{[]string{"run", "--nic", "x", "--cpus", "1-0"}, 1, "bad CPU range"},
		{[]string{"run", "--nic", "x", "--tap-addr", "198.18.0.1"}, 1, "--tap-addr"},
		{[]string{"run", "--nic", "x", "--tap-mac", "zz"}, 1, "bad MAC"},
		{[]string{"run", "--nic", "no-such-nic0"}, 1, `NIC "no-such-nic0" not found`},
		{[]string{"run", "--nic", "x", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"help"}, 0, ""},
		{[]string{"run", "-h"}, 0, "TAP MTU in bytes"},
	})
}

func TestNapiCLIUsage(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{[]string{"napi"}, 2, "Usage: tapfwd napi COMMAND"},
		{[]string{"napi", "frob"}, 2, `unknown command "frob"`},
		{[]string{"napi", "help"}, 0, "list   NAPI instances"},
		{[]string{"napi", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"napi", "list", "-h"}, 0, "empty lists every device"},
		{[]string{"napi", "set"}, 2, "--id is required"},
		{[]string{"napi", "set", "--id", "3"}, 2, "nothing to set"},
		{[]string{"napi", "set", "-h"}, 0, "nothing is\nrestored when it ends"},
		{[]string{"napi", "set", "-h"}, 0, "0 turns deferral off"},
		{[]string{"napi", "set", "--id", "3", "--threaded", "on"}, 1, "--threaded: want disabled, enabled or busy-poll"},
		{[]string{"napi", "set", "--id", "3", "--fifo", "100"}, 1, "--fifo 100: want a priority from 1 to 99"},
		{[]string{"napi", "set", "--id", "3", "--cpu", "-2"}, 1, "--cpu -2"},
		{[]string{"napi", "set", "--id", "3", "--gro-flush-timeout", "-1s"}, 1, "must not be negative"},
		{[]string{"napi", "set", "--id", "3", "--defer-hard-irqs", "2147483648"}, 1, "at most 2147483647"},
		{[]string{"napi", "set", "--id", "0", "--threaded", "enabled"}, 1, "not a NAPI id"},
	})
}

func TestVMPortCLIUsage(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{[]string{"vm-port"}, 2, "Commands:"},
		{[]string{"vm-port", "frob"}, 2, `unknown command "frob"`},
		{[]string{"vm-port", "add"}, 2, "--tap is required"},
		{[]string{"vm-port", "del"}, 2, "--name is required"},
		{[]string{"vm-port", "add", "--tap", "x", "--mac", "zz"}, 1, "--mac: tap: bad MAC"},
		{[]string{"vm-port", "add", "--tap", "x", "--name", "a:b"}, 1, "bad interface name"},
		{[]string{"vm-port", "list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"vm-port", "help"}, 0, "Commands:"},
		{[]string{"vm-port", "add", "-h"}, 0, "the guest's Ethernet address"},
	})
}

func TestStatusCLIErrors(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{[]string{"status", "--addr", "127.0.0.1:1"}, 1, "no tapfwd answers at 127.0.0.1:1"},
		{[]string{"version"}, 0, "tapfwd "},
	})
}
