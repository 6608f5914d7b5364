// Package compare sets two saved throughput reports side by side: for
// every cell both have, the ratio of the medians with its interval and a verdict.
package compare
