package vhostusertest

import (
	"context"
	"io"
	"os"
	"os/exec"
	"testing"
)

// StartHelper runs the running test binary again as a child that runs
// test alone, with env (KEY=value) set, and returns it with its standard
// output: a front-end (Hostile, say) in a process of its own, sharing
// nothing with the port but the socket and the fds it hands over. The
// child is killed and waited for when t ends.
func StartHelper(t testing.TB, test, env string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, out
}

// HostileChild is the body of a test that StartHelper runs as a hostile
// front-end: with env set to a port's socket path it makes PipeKick,
// SocketKick, SaturatedKick and BlockingCalls on it (Hostile), writing their
// lines to standard output, and stays on the last connection until killed;
// without env it skips (a normal run of the test binary).
func HostileChild(t *testing.T, env string) {
	path := os.Getenv(env)
	if path == "" {
		t.Skip("runs only as a hostile front-end's child process")
	}
	if err := Hostile(context.Background(), path, os.Stdout, PipeKick, SocketKick, SaturatedKick, BlockingCalls); err != nil {
		t.Fatal(err)
	}
}
