package activities

import (
	"context"
	"errors"

	"github.com/taskport/taskport/fileimport"
	"github.com/taskport/taskport/port"
)

// LocalFiles is Files over the fileimport package: the production wiring.
type LocalFiles struct{}

var _ Files = LocalFiles{}

// Import implements Files. A size or hash mismatch of the copy, or a
// different file at the target, cannot heal by retrying, so it is
// non-retryable and goes to the decision centre.
func (LocalFiles) Import(ctx context.Context, req ImportRequest) (ImportResult, error) {
	r, err := fileimport.Import(ctx, fileimport.Request{
		Source: req.Source, Target: req.Target, ExpectedSize: req.ExpectedSize, ExpectedSHA256: req.ExpectedSHA256,
		ChunkSize: req.ChunkSize, ShouldStop: req.ShouldStop, Progress: req.Progress,
	})
	if errors.Is(err, fileimport.ErrMismatch) || errors.Is(err, fileimport.ErrInvalidRequest) || errors.Is(err, fileimport.ErrTargetTaken) {
		return ImportResult{}, port.NonRetryable(err)
	}
	if err != nil {
		return ImportResult{}, err
	}
	return ImportResult{Size: r.Size, SHA256: r.SHA256, Reconciled: r.Reconciled}, nil
}

// Verify implements Files.
func (LocalFiles) Verify(path string, size int64, sha256 string) error {
	return fileimport.Verify(path, size, sha256)
}

// RemoveTemps implements Files.
func (LocalFiles) RemoveTemps(target string) error {
	_, err := fileimport.RemoveTemps(target)
	return err
}
