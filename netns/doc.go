// Package netns is tapfwd's one place for network namespaces and rtnetlink:
// it opens a namespace by its /run/netns name, runs code on a thread inside
// one, and reads and changes the links there.
package netns
