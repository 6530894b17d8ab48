package fileimport_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskport/taskport/fileimport"
)

// BenchmarkImport measures a full import (chunked copy with hashing, fsync,
// rename, directory fsync, read-back verification) of a 64 MiB file per
// chunk size, and the reconcile path that only re-hashes the target.
// go test -run '^$' -bench Import -benchtime 5x ./fileimport/
func BenchmarkImport(b *testing.B) {
	const size = 64 << 20
	f := newFixture(b, size)
	target := filepath.Join(f.dir, "library", "movie.mkv")
	for _, chunk := range []int{256 << 10, 1 << 20, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("copy/chunk=%dKiB", chunk>>10), func(b *testing.B) {
			req := f.request(target)
			req.ChunkSize = chunk
			b.SetBytes(size)
			for b.Loop() {
				b.StopTimer()
				if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := fileimport.Import(b.Context(), req)
				if err != nil || res.Reconciled {
					b.Fatalf("import: %+v %v", res, err)
				}
			}
		})
	}
	b.Run("reconcile", func(b *testing.B) {
		req := f.request(target)
		b.SetBytes(size)
		for b.Loop() {
			res, err := fileimport.Import(b.Context(), req)
			if err != nil || !res.Reconciled {
				b.Fatalf("import: %+v %v", res, err)
			}
		}
	})
}
