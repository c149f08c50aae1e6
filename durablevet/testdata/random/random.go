// Package random has workflows that draw random values.
package random

import (
	"context"
	crand "crypto/rand"
	"math/rand"
	randv2 "math/rand/v2"

	"github.com/durable-go/durable"
	"github.com/google/uuid"
)

func bad(wctx durable.Context, in int) (string, error) {
	n := rand.Intn(10)                   // want `rand.Intn in workflow code draws another value on replay: use durable.NewID\(wctx\), or draw the value in a durable.Step`
	r := randv2.New(randv2.NewPCG(1, 2)) // want `rand.New in workflow code` `rand.NewPCG in workflow code`
	n += r.IntN(3)                       // want `\(\*rand.Rand\).IntN in workflow code draws another value`
	b := make([]byte, 8)
	_, _ = crand.Read(b)                     // want `rand.Read in workflow code`
	_ = crand.Reader                         // want `rand.Reader in workflow code`
	return uuid.NewString() + string(b), nil // want `uuid.NewString in workflow code draws another value`
}

func good(wctx durable.Context, in int) (string, error) {
	id, err := durable.NewID(wctx)
	if err != nil {
		return "", err
	}
	n, err := durable.Step(wctx, "draw", func(ctx context.Context) (int, error) {
		b := make([]byte, 8)
		_, _ = crand.Read(b)
		return rand.Intn(10) + randv2.IntN(3) + len(uuid.NewString()), nil
	}, nil)
	if err != nil {
		return "", err
	}
	return id + string(rune(n+in)) + uuid.Nil.String(), nil // uuid.Nil is no random value
}
