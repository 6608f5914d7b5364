package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHolders: this process is among those holding /dev/null (char 1:3),
// a child whose command line names a path is found by it and named by its
// comm, and this process is not taken for one naming the path.
func TestHolders(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null := unix.Mkdev(1, 3)
	if got := DeviceHolders(map[uint64]bool{null: true}); !slices.Contains(got[null], os.Getpid()) {
		t.Errorf("DeviceHolders(1:3) = %v, lacks this process (%d)", got, os.Getpid())
	}
	path := filepath.Join(t.TempDir(), "guest.sock")
	cmd := exec.Command("sh", "-c", "sleep 10; :", "socket,path="+path+",reconnect=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// The shell's child for sleep names the path too until it has exec'd.
	var got map[string][]int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = Naming([]string{path, path + "x"}); len(got[path]) == 1 {
			break
		}
	}
	if !slices.Equal(got[path], []int{cmd.Process.Pid}) || len(got[path+"x"]) != 0 {
		t.Errorf("Naming = %v, want %s named by pid %d alone", got, path, cmd.Process.Pid)
	}
	if c := Comm(cmd.Process.Pid); c != "sh" {
		t.Errorf("Comm of the child = %q", c)
	}
	if c := Comm(-1); c != "?" {
		t.Errorf("Comm of no process = %q, want ?", c)
	}
}
