// Package archtest holds no code: its tests check the import rules of
// docs/design/architecture.md on the whole module (go list) and that libraries
// name no command-line flag in their errors.
package archtest
