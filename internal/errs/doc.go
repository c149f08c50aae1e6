// Package errs holds the sentinel errors the engine's services return or
// log, each the same value as the root package's exported one (errors.Is
// keeps working across the boundary). One file per area.
package errs
