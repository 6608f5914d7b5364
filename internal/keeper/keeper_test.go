package keeper

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tapfwd/tapfwd/internal/base/syncbuf"
	"github.com/tapfwd/tapfwd/vhostuser"
)

// The test binary doubles as the keeper: start runs /proc/self/exe with
// the keeper's subcommand, which TestMain serves.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 {
		switch os.Args[1] {
		case JanitorCommand:
			exit(ServeJanitor(os.Stdin, os.Stdout, os.Stderr))
		case testCommand:
			exit(serve("test-keeper", &testJob{}, os.Stdin, os.Stdout, os.Stderr))
		case silentCommand:
			os.Exit(3)
		case lingerCommand:
			err := serve("test-keeper", &testJob{}, os.Stdin, os.Stdout, os.Stderr)
			time.Sleep(lingerFor)
			exit(err)
		}
	}
	if len(os.Args) == 3 && os.Args[1] == parentCommand {
		exit(janitorParent(os.Args[2]))
	}
	os.Exit(m.Run())
}

func exit(err error) {
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// testCommand serves a testJob; silentCommand exits at once;
// lingerCommand serves a testJob and exits lingerFor after it ended.
const testCommand, silentCommand, lingerCommand = "test-keeper", "silent-keeper", "linger-keeper"

const lingerFor = 2 * time.Second

// testJob logs as it begins, fails when told to, and writes its file when
// it ends.
type testJob struct {
	Fail string `json:"fail"`
	File string `json:"file"`
}

func (j *testJob) begin(stderr io.Writer) (string, error) {
	io.WriteString(stderr, "begun\nfor "+j.File+"\n")
	if j.Fail != "" {
		return "", errors.New(j.Fail)
	}
	return "42", nil
}

func (j *testJob) done() <-chan struct{} { return nil }

func (j *testJob) end(io.Writer) error { return os.WriteFile(j.File, []byte("ended"), 0o600) }

// TestKeeper: the keeper gets its job, says it is ready with its detail,
// its stderr reaches the log, and it finishes its job only once stopped.
func TestKeeper(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ended")
	var out syncbuf.Buffer
	k, err := start("test keeper", testCommand, testJob{File: file}, slog.New(slog.NewTextHandler(&out, nil)), "said")
	if err != nil {
		t.Fatal(err)
	}
	if k.detail != "42" {
		t.Errorf("detail %q, want 42", k.detail)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(file); err == nil {
		t.Fatal("the job ended before Stop")
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "ended" {
		t.Errorf("after Stop: %q, %v", b, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "line=\"for "+file); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the keeper's stderr did not reach the log:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), "msg=said line=begun") {
		t.Errorf("log:\n%s", out.String())
	}
}

// TestKeeperFails: a job that cannot begin fails the start with its
// keeper's error, and the keeper is gone.
func TestKeeperFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ended")
	_, err := start("test keeper", testCommand, testJob{Fail: "no luck\ntoday", File: file}, slog.New(slog.DiscardHandler), "said")
	if err == nil || err.Error() != "no luck today" {
		t.Errorf("start: %v, want the keeper's error on one line", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Error("a job that did not begin ended")
	}
	if _, err := start("test keeper", silentCommand, testJob{File: file}, nil, ""); err == nil || !strings.Contains(err.Error(), "the test keeper exited without a word") {
		t.Errorf("a keeper that says nothing: %v", err)
	}
}

// TestJanitor removes a port's socket once stopped, and leaves a socket
// that is no longer the one the port made.
func TestJanitor(t *testing.T) {
	dir := t.TempDir()
	mine, other := filepath.Join(dir, "lab0-0.sock"), filepath.Join(dir, "lab0-1.sock")
	files := []vhostuser.SocketFile{socketFile(t, mine), socketFile(t, other)}
	// A later run's socket at the same path (the first one kept, so that
	// the new one cannot get its inode).
	os.Rename(other, filepath.Join(dir, "kept"))
	socketFile(t, other)
	k, err := StartJanitor(Janitor{Sockets: files})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(mine); err != nil {
		t.Fatalf("removed before Stop: %v", err)
	}
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(mine); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after Stop: %v", mine, err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("the later socket went too: %v", err)
	}
}

// socketFile makes a unix socket at path and says which file it is.
func socketFile(t *testing.T, path string) vhostuser.SocketFile {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return vhostuser.SocketFile{Path: path, Ino: st.Ino}
}

// parentCommand is a tapfwd stand-in for TestJanitorOutlivesGroupKill: it
// starts a janitor for the job in its second argument, says "ready" and
// waits to be killed.
const parentCommand = "janitor-parent"

func janitorParent(job string) error {
	var j Janitor
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		return err
	}
	if _, err := StartJanitor(j); err != nil {
		return err
	}
	os.Stdout.WriteString("ready\n")
	select {}
}

// TestKeeperOwnGroup: a keeper runs in a process group of its own, not
// in the one of the process that started it.
func TestKeeperOwnGroup(t *testing.T) {
	k, err := start("test keeper", testCommand, testJob{File: filepath.Join(t.TempDir(), "ended")}, slog.New(slog.DiscardHandler), "said")
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	pgid, err := syscall.Getpgid(k.pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == syscall.Getpgrp() || pgid != k.pid {
		t.Errorf("the keeper (pid %d) is in process group %d, ours is %d: want one of its own", k.pid, pgid, syscall.Getpgrp())
	}
}

// TestJanitorOutlivesGroupKill (issue 35): SIGKILL to the process group
// of a process that started a janitor (kill -9 -- -PGID) leaves the
// janitor, which then removes the socket.
func TestJanitorOutlivesGroupKill(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "lab0-0.sock")
	job, err := json.Marshal(Janitor{Sockets: []vhostuser.SocketFile{socketFile(t, sock)}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", parentCommand, string(job))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
		t.Fatalf("the janitor's parent said %q", l)
	}
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("removed before the kill: %v", err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(sock); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there 5 s after kill -9 of its janitor's parent's group: the janitor died with it", sock)
		}
	}
}

// TestKeeperStopWaitsForJob: Stop returns once the keeper has finished its
// job, not once it has exited (issue 38, item 7h: a race-detector build
// sleeps a second at exit, and tapfwd's stop waited for it).
func TestKeeperStopWaitsForJob(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ended")
	k, err := start("test keeper", lingerCommand, testJob{File: file}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if b, err := os.ReadFile(file); err != nil || string(b) != "ended" {
		t.Errorf("after Stop: %q, %v: the job had not ended", b, err)
	}
	if took > lingerFor/2 {
		t.Errorf("Stop took %v: it waited for the keeper's exit, %v after its job ended", took, lingerFor)
	}
	select {
	case <-k.exited:
		t.Error("the keeper exited before it lingered")
	default:
	}
	<-k.exited
}
