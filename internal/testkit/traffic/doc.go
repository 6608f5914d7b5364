// Package traffic makes and watches the end-to-end tests' frames on a bed:
// pings, UDP floods, malformed and VLAN-tagged frames on packet sockets,
// captures, and a data server that checks what guests send and fetch.
package traffic
