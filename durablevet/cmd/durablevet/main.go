// Command durablevet reports what breaks the replay of durable workflows
// (see package github.com/durable-go/durable/durablevet for the rules).
//
// Run it on packages, or through go vet:
//
//	durablevet ./...
//	go vet -vettool=$(which durablevet) ./...
//
// A comment //durable:nondeterministic-ok silences a finding on purpose.
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/durable-go/durable/durablevet"
)

func main() { singlechecker.Main(durablevet.Analyzer) }
