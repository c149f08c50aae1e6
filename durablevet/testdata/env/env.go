// Package env has workflows that read the process's environment.
package env

import (
	"context"
	"os"

	"github.com/durable-go/durable"
)

func bad(wctx durable.Context, in string) (string, error) {
	region := os.Getenv("REGION")       // want `os.Getenv in workflow code may read another value on the executor that replays the run: pass it in the workflow's input, or read it in a durable.Step`
	if _, ok := os.LookupEnv("X"); ok { // want `os.LookupEnv in workflow code`
		region += "x"
	}
	host, _ := os.Hostname()               // want `os.Hostname in workflow code`
	return region + host + os.Args[0], nil // want `os.Args in workflow code`
}

type Input struct{ Region string }

func good(wctx durable.Context, in Input) (string, error) {
	host, err := durable.Step(wctx, "host", func(ctx context.Context) (string, error) {
		h, err := os.Hostname()
		return h + os.Getenv("REGION"), err
	}, nil)
	return in.Region + host, err // the caller read REGION and passed it in
}

func start(ctx context.Context, wf *durable.Workflow[Input, string]) error {
	_, err := wf.Start(ctx, Input{Region: os.Getenv("REGION")}, nil) // not workflow code
	return err
}
