package dbtx_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/taskport/taskport/internal/dbtx"
)

// TestUUIDArrayEncodesAsUUIDs: the bytes pgx sends for a UUIDArray are the
// ones it sends for the same ids as []uuid.UUID, so the faster type is the
// same argument.
func TestUUIDArrayEncodesAsUUIDs(t *testing.T) {
	m := pgtype.NewMap()
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	arr := make(dbtx.UUIDArray, len(ids))
	for i, id := range ids {
		arr[i] = dbtx.UUID(id)
	}
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		want, err := m.Encode(pgtype.UUIDArrayOID, format, ids, nil)
		require.NoError(t, err)
		got, err := m.Encode(pgtype.UUIDArrayOID, format, arr, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "format %d", format)
	}
}

// TestUUIDEncodesAndScansAsUUID: a UUID argument is sent as the same bytes
// as the uuid.UUID, also as a parameter of unknown type (OID 0, the exec
// and simple_protocol query exec modes), and scanning a uuid into a *UUID
// reads the id that scanning into a *uuid.UUID does, in either format.
func TestUUIDEncodesAndScansAsUUID(t *testing.T) {
	m := pgtype.NewMap()
	id := uuid.New()
	want, err := m.Encode(0, pgtype.TextFormatCode, id, nil)
	require.NoError(t, err)
	got, err := m.Encode(0, pgtype.TextFormatCode, dbtx.UUID(id), nil)
	require.NoError(t, err, "a parameter of unknown type")
	require.Equal(t, want, got, "a parameter of unknown type")
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		want, err := m.Encode(pgtype.UUIDOID, format, id, nil)
		require.NoError(t, err)
		got, err := m.Encode(pgtype.UUIDOID, format, dbtx.UUID(id), nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "format %d", format)

		var viaScanner, viaBytes uuid.UUID
		require.NoError(t, m.Scan(pgtype.UUIDOID, format, want, &viaScanner))
		require.NoError(t, m.Scan(pgtype.UUIDOID, format, want, (*dbtx.UUID)(&viaBytes)))
		require.Equal(t, id, viaScanner, "format %d", format)
		require.Equal(t, id, viaBytes, "format %d", format)
	}
	var u dbtx.UUID
	require.Error(t, m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, nil, &u), "NULL")
}

// BenchmarkUUID encodes one id as pgx does a uuid argument, and scans one
// back as it does a uuid column, in the binary format pgx uses for both.
func BenchmarkUUID(b *testing.B) {
	m := pgtype.NewMap()
	id := uuid.New()
	wire, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, id, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		arg    any
		target any
	}{{"uuid.UUID", id, new(uuid.UUID)}, {"UUID", dbtx.UUID(id), new(dbtx.UUID)}} {
		b.Run("encode/"+c.name, func(b *testing.B) { benchEncode(b, m, pgtype.UUIDOID, c.arg) })
		b.Run("scan/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Scan(pgtype.UUIDOID, pgtype.BinaryFormatCode, wire, c.target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUUIDArray encodes 20 ids, a group commit's worth, as pgx does a
// uuid[] argument.
func BenchmarkUUIDArray(b *testing.B) {
	m := pgtype.NewMap()
	ids := make([]uuid.UUID, 20)
	arr := make(dbtx.UUIDArray, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		arr[i] = dbtx.UUID(ids[i])
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"uuid.UUID", ids}, {"UUIDArray", arr}} {
		b.Run(c.name, func(b *testing.B) { benchEncode(b, m, pgtype.UUIDArrayOID, c.v) })
	}
}

// benchEncode encodes v as an argument of type oid, as pgx does in the
// binary format, once per iteration.
func benchEncode(b *testing.B, m *pgtype.Map, oid uint32, v any) {
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}
