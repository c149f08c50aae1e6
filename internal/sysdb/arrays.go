package sysdb

import (
	"database/sql/driver"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// The array parameters of the batch statements (a step, a finish per
// row). pgx encodes a plain slice by boxing each element in an interface
// on its way to the element's codec: an allocation per element, two
// through reflection for slices of named types such as json.RawMessage.
// These slice types hand pgx a pointer to each element instead, which
// boxes for free, and each element type has the Valuer method its codec
// reads without boxing. A drained one-step run made 13 such allocations,
// now 2 (its step's output and its own).

// textArray is a text[] parameter.
type textArray []string

// int4Array is an int4[] parameter.
type int4Array []int32

// int8Array is an int8[] parameter.
type int8Array []int64

// timeArray is a timestamptz[] parameter.
type timeArray []time.Time

// jsonArray is a json[] parameter. The JSON codec reads no Valuer
// interface of its own, but a driver.Valuer: a NULL element (no error,
// the common case) boxes nothing, a value its bytes.
type jsonArray []json.RawMessage

// valuerArray is an array parameter of nullable pgtype values (pgtype.Text,
// pgtype.Timestamptz): a pointer to each has its codec's Valuer method.
type valuerArray[T any] []T

func (a valuerArray[T]) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a valuerArray[T]) Index(i int) any                     { return &a[i] }
func (a valuerArray[T]) IndexType() any                      { return new(T) }
func (a valuerArray[T]) Value() (driver.Value, error)        { return []T(a), nil }

// A statement whose parameter types pgx does not know (the exec and simple
// protocol modes that poolers need) finds no codec for these types by
// their Go type: each is then a driver.Valuer that returns the plain
// slice, which pgx sends as before.

func (a textArray) Value() (driver.Value, error) { return []string(a), nil }
func (a int4Array) Value() (driver.Value, error) { return []int32(a), nil }
func (a int8Array) Value() (driver.Value, error) { return []int64(a), nil }
func (a timeArray) Value() (driver.Value, error) { return []time.Time(a), nil }
func (a jsonArray) Value() (driver.Value, error) { return []json.RawMessage(a), nil }

// dims are the dimensions of a one-dimensional array of n elements; a nil
// slice is NULL, as pgx sends it.
func dims(isNil bool, n int) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

func (a textArray) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a textArray) Index(i int) any                     { return (*textElem)(&a[i]) }
func (a textArray) IndexType() any                      { return new(textElem) }

func (a int4Array) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a int4Array) Index(i int) any                     { return (*int4Elem)(&a[i]) }
func (a int4Array) IndexType() any                      { return new(int4Elem) }

func (a int8Array) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a int8Array) Index(i int) any                     { return (*int8Elem)(&a[i]) }
func (a int8Array) IndexType() any                      { return new(int8Elem) }

func (a timeArray) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a timeArray) Index(i int) any                     { return (*timeElem)(&a[i]) }
func (a timeArray) IndexType() any                      { return new(timeElem) }

func (a jsonArray) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }
func (a jsonArray) Index(i int) any                     { return (*jsonElem)(&a[i]) }
func (a jsonArray) IndexType() any                      { return new(jsonElem) }

type (
	jsonElem json.RawMessage
	textElem string
	int4Elem int32
	int8Elem int64
	timeElem time.Time
)

func (e *jsonElem) Value() (driver.Value, error) {
	if *e == nil {
		return nil, nil
	}
	return []byte(*e), nil
}

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

func (e *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}
