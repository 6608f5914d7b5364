// Package syncbuf is a byte buffer that one goroutine writes (a process's
// output, a logger's handler) while others read it: for tests and the test bed.
package syncbuf
