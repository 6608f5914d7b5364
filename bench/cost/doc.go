// Package cost measures what a run costs the whole machine: CPU time from
// /proc/stat over a window, split into user, system and softirq, per unit delivered.
package cost
