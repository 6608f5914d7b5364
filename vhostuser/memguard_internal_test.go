package vhostuser

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPrivateIn: what smaps says a mapping holds alone is the pages read
// through it from holes; pages another mapping also holds are not.
func TestPrivateIn(t *testing.T) {
	fd, err := unix.MemfdCreate("memguard", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const size = 64 << 20
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	other, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapTable([]regionDesc{{gpa: 0, size: size, uaddr: 0, mmapOffset: 0}}, []int{dup})
	if err != nil {
		t.Fatal(err)
	}
	defer tab.unmap()
	mem := tab.regions[0].mem
	var sum int
	for off := 0; off < 8<<20; off += 4096 { // 8 MiB of holes, read
		sum += int(mem[off])
	}
	for off := 8 << 20; off < 12<<20; off += 4096 { // 4 MiB the other mapping wrote
		other[off] = 1
		sum += int(mem[off])
	}
	if sum != 4<<20>>12 {
		t.Fatalf("read %d ones, want %d", sum, 4<<20>>12)
	}
	g := &memGuard{}
	if !g.smaps.open("/proc/self/smaps") || !g.readSmaps() {
		t.Fatal("cannot read /proc/self/smaps")
	}
	defer unix.Close(g.smaps.fd)
	if got := privateIn(g.vmas, &tab); got != 8<<20 {
		t.Errorf("the mapping holds %d bytes alone, want %d", got, 8<<20)
	}
}

// TestPeerExited: a running process has not exited; once killed it has,
// a zombie or reaped.
func TestPeerExited(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Process.Kill()
	_, start := procState(cmd.Process.Pid)
	pp := peerProc{pid: cmd.Process.Pid, start: start}
	if start == "" || pp.exited() {
		t.Fatalf("a running process (start %q) has exited", start)
	}
	_ = cmd.Process.Kill()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) { // a zombie, not reaped yet
		if st, _ := procState(pp.pid); st == "Z" || time.Now().After(deadline) {
			break
		}
	}
	if !pp.exited() {
		t.Error("a killed process (a zombie) has not exited")
	}
	_ = cmd.Wait()
	if !pp.exited() {
		t.Error("a reaped process has not exited")
	}
	if (peerProc{}).exited() || (peerProc{pid: 1}).exited() {
		t.Error("an unknown peer has exited")
	}
}
