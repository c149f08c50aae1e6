package main

// The mutants of the stream writer (internal/stream).

func init() {
	register(
		Mutant{
			Name:      "stream/batch",
			Mechanism: "entries queued together, of one run or several, are written by one statement",
			Edits: []Edit{{File: "internal/stream/writer.go",
				Find:    "for n < len(w.pending) && n < w.cfg.BatchRows {",
				Replace: "for n < len(w.pending) && n < 1 {"}},
			Pkg: "./internal/stream", Tests: "TestWriterBatchesRuns$|TestWriterGathersWhileWriting$",
		},
		Mutant{
			Name:      "stream/back-pressure",
			Mechanism: "a stream write blocks while the writer's queue is full",
			Edits: []Edit{{File: "internal/stream/writer.go",
				Find:    "if len(w.pending) < w.cfg.MaxPendingRows && w.bytes < w.cfg.MaxPendingBytes {",
				Replace: "if true {"}},
			Pkg: "./internal/stream", Tests: "TestWriterBackPressure$",
		},
		Mutant{
			Name:      "stream/retry",
			Mechanism: "a stream statement that failed with a transient error is tried again",
			Edits: []Edit{{File: "internal/stream/writer.go",
				Find:    "if err == nil || !w.cfg.Transient(err) {",
				Replace: "if true {"}},
			Pkg: "./internal/stream", Tests: "TestWriterRetries$",
		},
		Mutant{
			Name:      "stream/stop",
			Mechanism: "entries the stopped writer did not store fail with ErrShutdown",
			Edits: []Edit{{File: "internal/stream/writer.go",
				Find:    "case err != nil && ctx.Err() != nil:",
				Replace: "case false:"}},
			Pkg: "./internal/stream", Tests: "TestWriterStop$",
		},
		Mutant{
			Name:      "stream/drop-after-failure",
			Mechanism: "entries queued behind a run's failed statement are dropped, not written after a gap",
			Edits: []Edit{{File: "internal/stream/writer.go",
				Find:    "if _, seen := counts[row.rs]; !seen && row.rs.failed() {",
				Replace: "if false {"}},
			Pkg: "./internal/stream", Tests: "TestWriterDropsAfterFailure$",
		},
		Mutant{
			Name:      "stream/halt-before-wake",
			Mechanism: "a rejected flush halts its run before its waiters wake, so Flush's error and Halted agree",
			Edits: []Edit{{File: "internal/stream/run.go",
				Find:    "\t\trs.r.Halt(err)\n\t}\n\trs.mu.Lock()",
				Replace: "\t}\n\tdefer func() {\n\t\tif err != nil {\n\t\t\trs.r.Halt(err)\n\t\t}\n\t}()\n\trs.mu.Lock()"}},
			Pkg: "./internal/stream", Tests: "TestWriterRejects$",
		},
		Mutant{
			Name:      "stream/replay-once",
			Mechanism: "a replay of workflow code skips the stream entries its earlier executions stored",
			Edits: []Edit{{File: "internal/stream/run.go",
				Find:    "case wseq >= 0 && wseq <= ks.replayed:",
				Replace: "case false:"}},
			Pkg: "./internal/stream", Tests: "TestWriterReplay$",
		},
		Mutant{
			Name:      "stream/closed",
			Mechanism: "a write to a closed stream fails with ErrStreamClosed, also in a later execution",
			Edits: []Edit{{File: "internal/stream/run.go",
				Find:    "ks.closed = st.Closed",
				Replace: "ks.closed = false"}},
			Pkg: "./internal/stream", Tests: "TestWriterClose$",
		},
	)
}
