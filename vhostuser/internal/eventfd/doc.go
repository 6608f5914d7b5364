// Package eventfd handles eventfds shared with a process that is not trusted:
// it signals them without ever waiting and tells an eventfd from other files.
package eventfd
