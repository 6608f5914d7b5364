// Package privdrop makes a running process a plain user for good: ids,
// supplementary groups, every capability set of every thread, and
// no_new_privs, checked thread by thread afterwards.
package privdrop
