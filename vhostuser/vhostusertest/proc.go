package vhostusertest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

func procDir(pid int) string {
	if pid == 0 {
		return "/proc/self"
	}
	return "/proc/" + strconv.Itoa(pid)
}

// MapsLines counts the lines of /proc/PID/maps (0: this process) that
// contain s, such as "memfd:" for guest memory a back-end mapped.
func MapsLines(pid int, s string) (int, error) {
	b, err := os.ReadFile(procDir(pid) + "/maps")
	if err != nil {
		return 0, fmt.Errorf("vhostusertest: %w", err)
	}
	return strings.Count(string(b), s), nil
}

// Fds counts a process's file descriptors (/proc/PID/fd; 0: this process)
// by the kinds a vhost-user front-end gives a back-end.
type Fds struct {
	Eventfds int // kick, call and error eventfds
	Sockets  int // the connection
	Memfds   int // guest memory files
	Other    int
}

// CountFds reads /proc/PID/fd.
func CountFds(pid int) (Fds, error) {
	dir := procDir(pid) + "/fd"
	e, err := os.ReadDir(dir)
	if err != nil {
		return Fds{}, fmt.Errorf("vhostusertest: %w", err)
	}
	var k Fds
	for _, f := range e {
		l, err := os.Readlink(dir + "/" + f.Name())
		switch {
		case err != nil: // gone meanwhile (the directory's own fd)
		case l == "anon_inode:[eventfd]":
			k.Eventfds++
		case strings.HasPrefix(l, "socket:"):
			k.Sockets++
		case strings.HasPrefix(l, "/memfd:"):
			k.Memfds++
		default:
			k.Other++
		}
	}
	return k, nil
}
