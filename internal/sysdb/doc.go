// Package sysdb holds every SQL statement the engine runs against its own
// schema, rendered once for the configured schema name.
//
// It may not import the root durable package.
package sysdb
