// Package maporder has workflows that iterate over maps.
package maporder

import (
	"context"
	"maps"
	"slices"

	"github.com/durable-go/durable"
)

func bad(wctx durable.Context, in map[string]int) (int, error) {
	total := 0
	for k, v := range in { // want `range over in in workflow code calls durable operations in map order, which differs on replay: range over the sorted keys \(slices.Sorted\(maps.Keys\(m\)\)\)`
		n, err := durable.Step(wctx, "add-"+k, func(context.Context) (int, error) { return v, nil }, nil)
		if err != nil {
			return 0, err
		}
		total += n
	}
	for k := range maps.Keys(in) { // want `range over maps.Keys\(in\) in workflow code calls durable operations in map order`
		if err := durable.SetEvent(wctx, k, total); err != nil {
			return 0, err
		}
	}
	for _, k := range slices.Collect(maps.Keys(in)) { // want `range over slices.Collect\(maps.Keys\(in\)\) in workflow code calls durable operations`
		if err := notify(wctx, k); err != nil {
			return 0, err
		}
	}
	return total, nil
}

func notify(wctx durable.Context, k string) error {
	return durable.SetEvent(wctx, "seen", k)
}

func good(wctx durable.Context, in map[string]int) (int, error) {
	total := 0
	for _, k := range slices.Sorted(maps.Keys(in)) {
		n, err := durable.Step(wctx, "add-"+k, func(context.Context) (int, error) { return in[k], nil }, nil)
		if err != nil {
			return 0, err
		}
		total += n
	}
	sum := 0
	for _, v := range in { // no durable call: the order does not matter
		sum += v
	}
	_, err := durable.Step(wctx, "sum", func(context.Context) (int, error) {
		s := 0
		for _, v := range in {
			s += v
		}
		return s, nil
	}, nil)
	return total + sum, err
}
