// Package cpulist parses CPU lists in the kernel's notation ("0,2-3") and
// checks them against the CPUs this process may run on.
package cpulist
