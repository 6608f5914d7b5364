// Package keeper runs tapfwd's keepers: privileged children (this binary
// again) that hold a job while tapfwd runs and finish it when tapfwd ends.
package keeper
