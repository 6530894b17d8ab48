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

// Verify implements Files. It heartbeats after each chunk hashed: a big
// file takes minutes to hash, and a step that stops heartbeating is how
// Temporal learns that its worker died (asset.verify's heartbeat timeout)
// before the step's whole timeout runs out.
func (LocalFiles) Verify(ctx context.Context, path string, size int64, sha256 string) error {
	return fileimport.Verify(ctx, path, size, sha256, func(hashed int64) {
		// A heartbeat that fails because the step was canceled ends ctx,
		// which stops the hashing; nothing else is to be done with it here.
		_ = port.Heartbeat(ctx, progressOf(hashed, size))
	})
}

// RemoveTemps implements Files.
func (LocalFiles) RemoveTemps(target string) error {
	_, err := fileimport.RemoveTemps(target)
	return err
}
