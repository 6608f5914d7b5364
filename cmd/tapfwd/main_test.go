package main

import (
	"testing"

	"github.com/tapfwd/tapfwd/internal/cliflag/clitest"
)

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
		{[]string{"napi", "set", "--id", "3", "--threaded", "on"}, 2, "--threaded on: want disabled, enabled or busy-poll"},
		{[]string{"napi", "set", "--id", "3", "--fifo", "100"}, 2, "--fifo 100: want a priority from 1 to 99"},
		{[]string{"napi", "set", "--id", "3", "--cpu", "-2"}, 2, "--cpu -2"},
		{[]string{"napi", "set", "--id", "3", "--gro-flush-timeout", "-1s"}, 2, "must not be negative"},
		{[]string{"napi", "set", "--id", "3", "--defer-hard-irqs", "2147483648"}, 2, "at most 2147483647"},
		{[]string{"napi", "set", "--id", "0", "--threaded", "enabled"}, 2, "not a NAPI id"},
	})
}

func TestVMPortCLIUsage(t *testing.T) {
	clitest.Check(t, "tapfwd", run, []clitest.Case{
		{[]string{"vm-port"}, 2, "Commands:"},
		{[]string{"vm-port", "frob"}, 2, `unknown command "frob"`},
		{[]string{"vm-port", "add"}, 2, "--tap is required"},
		{[]string{"vm-port", "del"}, 2, "--name is required"},
		{[]string{"vm-port", "add", "--tap", "x", "--mac", "zz"}, 2, "--mac zz: want six hex bytes"},
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
