package testkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/lab/testbed"
)

// BedRun runs args in namespace ns of bed and returns the output; it fails
// t when the command fails or takes more than 20 s.
func BedRun(t testing.TB, bed *testbed.Bed, ns string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := bed.Run(ctx, ns, args[0], args[1:]...)
	if err != nil {
		t.Fatalf("%s in %s: %v", strings.Join(args, " "), ns, err)
	}
	return out
}

// Run runs cmd and returns its exit status and what it wrote to stdout
// and stderr; it fails t when cmd cannot be run or is killed.
func Run(t testing.TB, cmd *exec.Cmd) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() >= 0 {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
	}
	return 0, out.String(), errb.String()
}

// CLI runs the tapfwd binary (Tapfwd) with args in this process's network
// namespace and returns its exit status and output.
func CLI(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return Run(t, exec.Command(Tapfwd(t), args...))
}

// HTTPGet fetches rawURL from inside namespace ns and returns the status
// code and the body. The socket is made on the locked thread of bed.Do (an
// http.Client would dial from another goroutine, in the wrong namespace).
func HTTPGet(t testing.TB, bed *testbed.Bed, ns, rawURL string) (int, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	var conn net.Conn
	if err := bed.Do(ns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", u.Host, 2*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
