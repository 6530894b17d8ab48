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
		arr[i] = id
	}
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		want, err := m.Encode(pgtype.UUIDArrayOID, format, ids, nil)
		require.NoError(t, err)
		got, err := m.Encode(pgtype.UUIDArrayOID, format, arr, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "format %d", format)
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
		arr[i] = ids[i]
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"uuid.UUID", ids}, {"UUIDArray", arr}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, c.v, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
