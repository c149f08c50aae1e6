package main

// The mutants of guarantee 7, nothing lost under bad input: panics in user
// code and oversized payloads end as typed errors, not as a crashed host
// or an oversized row.

func init() {
	register(
		Mutant{
			Name:      "badinput/workflow-panic",
			Mechanism: "a panic in workflow code fails the run with a PanicError instead of crashing the host (callWorkflow)",
			Edits: []Edit{{File: "runner.go",
				Find:    "\t\tif p := recover(); p != nil {\n\t\t\tout, err = nil, &PanicError{",
				Replace: "\t\tif p := any(nil); p != nil {\n\t\t\tout, err = nil, &PanicError{"}},
			Pkg: ".", Tests: "^TestWorkflow$/^PanicsAreRecorded$",
		},
		Mutant{
			Name:      "badinput/step-panic",
			Mechanism: "a panic in a step fails the step with a PanicError instead of crashing the host (attempt)",
			Edits: []Edit{{File: "step.go",
				Find:    "\t\tif p := recover(); p != nil {\n\t\t\terr = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}\n\t\t}\n\t}()\n\tout, err = fn(ctx)\n",
				Replace: "\t\tif p := any(nil); p != nil {\n\t\t\terr = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}\n\t\t}\n\t}()\n\tout, err = fn(ctx)\n"}},
			Pkg: ".", Tests: "^TestWorkflow$/^PanicsAreRecorded$",
		},
		Mutant{
			Name:      "badinput/tx-step-panic",
			Mechanism: "a panic in a transaction step fails the step with a PanicError, its transaction rolled back (callTx)",
			Edits: []Edit{{File: "step.go",
				Find:    "\t\tif p := recover(); p != nil {\n\t\t\terr = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}\n\t\t}\n\t}()\n\tout, err = fn(ctx, tx)\n",
				Replace: "\t\tif p := any(nil); p != nil {\n\t\t\terr = &PanicError{Value: fmt.Sprint(p), Stack: string(debug.Stack())}\n\t\t}\n\t}()\n\tout, err = fn(ctx, tx)\n"}},
			Pkg: ".", Tests: "^TestWorkflow$/^PanicsAreRecorded$",
		},
		Mutant{
			Name:      "badinput/payload-limit",
			Mechanism: "a payload over Config.MaxPayloadBytes is refused with a PayloadTooLargeError (encodePayload)",
			Edits: []Edit{{File: "run.go",
				Find:    "\tif len(b) > limit {\n\t\treturn nil, &PayloadTooLargeError{",
				Replace: "\tif false && len(b) > limit {\n\t\treturn nil, &PayloadTooLargeError{"}},
			Pkg: ".", Tests: "^TestBadInput$/^OversizedPayloads$",
		},
	)
}
