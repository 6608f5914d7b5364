// Package latency is the request/response experiment: round trips at fixed
// rates and delays through tapfwd's polling modes and the bridge.
package latency
