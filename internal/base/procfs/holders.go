package procfs

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DeviceHolders returns, for each character device number in devs
// (unix.Mkdev), the processes that have that device open, whichever node
// they opened it through. It reads /proc/PID/fd; the processes whose fds
// this one may not read are missed.
func DeviceHolders(devs map[uint64]bool) map[uint64][]int {
	out := map[uint64][]int{}
	eachFd(func(pid int, fd string) {
		var st unix.Stat_t
		if unix.Stat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || !devs[st.Rdev] {
			return
		}
		if !slices.Contains(out[st.Rdev], pid) {
			out[st.Rdev] = append(out[st.Rdev], pid)
		}
	})
	return out
}

// Naming returns, for each of paths, the processes other than this one
// whose command line has an argument that contains it, such as QEMU's
// "-chardev socket,path=PATH,reconnect=1".
func Naming(paths []string) map[string][]int {
	out := map[string][]int{}
	if len(paths) == 0 {
		return out
	}
	for _, pid := range pids() {
		args, err := Cmdline(pid)
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, p := range paths {
			if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, p) }) {
				out[p] = append(out[p], pid)
			}
		}
	}
	return out
}

// Comm is process pid's command name (/proc/PID/comm), "?" when it cannot
// be read (the process has gone).
func Comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// pids are the processes in /proc.
func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// eachFd calls fn with each process's pid and the /proc path of each of
// its fds that this process may read.
func eachFd(fn func(pid int, fd string)) {
	for _, pid := range pids() {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			fn(pid, dir+fd.Name())
		}
	}
}
