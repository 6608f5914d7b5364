// Package rootdir makes and checks the directories root keeps files in for
// other root processes to trust: the VM ports' device nodes, the DHCP
// server's lease files.
package rootdir
