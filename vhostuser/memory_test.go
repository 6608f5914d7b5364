package vhostuser_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tapfwd/tapfwd/vhostuser"
	"github.com/tapfwd/tapfwd/vhostuser/vhostusertest"
)

// diskFile is a file of n bytes on a file system that keeps its pages on
// a disk (whichever of the test's temporary directory and its working
// directory is not tmpfs).
func diskFile(t *testing.T, n int64) *os.File {
	t.Helper()
	for _, dir := range []string{t.TempDir(), "."} {
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil || fs.Type == unix.TMPFS_MAGIC {
			continue
		}
		f, err := os.CreateTemp(dir, "guest-memory")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
		if err := f.Truncate(n); err != nil {
			t.Fatal(err)
		}
		return f
	}
	t.Fatal("no directory on a file system other than tmpfs")
	return nil
}

// Issue 22, item 10: guest memory must be held in memory (memfd, tmpfs,
// hugetlbfs): a region in a file on another file system, whose page
// faults can wait on a disk or a network (FUSE, NFS), sends the front-end
// away with one line saying so; a memfd region is taken.
func TestMemoryFileSystems(t *testing.T) {
	p := newPort(t, vhostuser.Config{})
	d := p.dialStopped(t)
	const ack = vhostusertest.FlagVersion | vhostusertest.FlagNeedReply
	if err := d.Request(vhostusertest.ReqSetMemTable, ack, memTable(d, 4096), d.Memfd()); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Reply(vhostusertest.ReqSetMemTable); err != nil || le64(r) != 0 {
		t.Fatalf("a memfd region: %x %v", r, err)
	}
	f := diskFile(t, 1<<20)
	if err := d.Request(vhostusertest.ReqSetMemTable, ack, memTable(d, 4096), int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	e := p.wait(t, vhostuser.EventDisconnected)
	if e.Err == nil || !strings.Contains(e.Err.Error(), "region 0: the file is on") ||
		!strings.Contains(e.Err.Error(), "guest memory must be memfd, tmpfs (/dev/shm) or hugetlbfs") {
		t.Fatalf("disconnected with %v, want the file system refused", e.Err)
	}
	t.Log(e.Err)
}
