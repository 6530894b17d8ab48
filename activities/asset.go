package activities

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/fileimport"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/workflows"
)

// ImportProgress is what the import and verify steps report through their
// heartbeats.
type ImportProgress struct {
	Bytes   int64   `json:"bytes"`
	Total   int64   `json:"total"`
	Percent float64 `json:"percent"`
}

// progressOf is the heartbeat detail of a copy or a hash that has done
// bytes of total.
func progressOf(bytes, total int64) ImportProgress {
	pr := ImportProgress{Bytes: bytes, Total: total}
	if total > 0 {
		pr.Percent = 100 * float64(bytes) / float64(total)
	}
	return pr
}

// ImportAsset copies the download into the library through the ledger.
// Before it writes anything to the target it records (claimTarget) whether
// it creates the file or adopts an identical one already there; a different
// file at the target is never overwritten. After an interrupted attempt it
// reconciles by that record and the file's size and hash. Between chunks it
// checks the business cancel flag (and the heartbeat's verdict) and stops
// itself; a canceled import leaves neither a temp file nor a library file it
// created.
func (a *Activities) ImportAsset(ctx context.Context, ref workflows.PlanRef) (workflows.ImportOutcome, error) {
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.ImportOutcome{Canceled: canceled}, err
	}
	if err := a.checkTarget(p); err != nil {
		return workflows.ImportOutcome{}, err
	}
	out, err := ledger.Run(ctx, a.pool, ledger.Fenced[workflows.ImportOutcome]{
		PlanID: p.ID, Op: ledger.OpImport,
		Reconcile: func(ctx context.Context, _ ledger.Operation) (workflows.ImportOutcome, bool, error) {
			n, noted, err := a.importNote(ctx, p)
			if err != nil || !noted {
				return workflows.ImportOutcome{}, false, err
			}
			if err := a.files.Verify(ctx, p.TargetPath, n.Size, n.SHA256); err != nil {
				return workflows.ImportOutcome{}, false, nil //nolint:nilerr // not in place yet: import again
			}
			return workflows.ImportOutcome{Size: n.Size, SHA256: n.SHA256, Reconciled: true, Origin: n.Origin}, true, nil
		},
		Do: func(ctx context.Context, o ledger.Operation) (workflows.ImportOutcome, error) {
			origin, err := a.claimTarget(ctx, p, o)
			if err != nil {
				return workflows.ImportOutcome{}, err
			}
			if origin == originAdopted {
				return workflows.ImportOutcome{Size: p.ExpectedSize, SHA256: p.ExpectedSHA256, Reconciled: true, Origin: origin}, nil
			}
			source, err := a.contentPath(ctx, p)
			if err != nil {
				return workflows.ImportOutcome{}, err
			}
			if err := a.checkContent(p, source); err != nil {
				return workflows.ImportOutcome{}, err
			}
			r, err := a.files.Import(ctx, a.importRequest(ctx, p, source))
			if errors.Is(err, errPlanCanceled) || port.Canceled(ctx) {
				return workflows.ImportOutcome{}, errPlanCanceled
			}
			if err != nil {
				return workflows.ImportOutcome{}, fmt.Errorf("import plan %s: %w", p.ID, err)
			}
			// A cancel that arrived after the last chunk: compensation may
			// already have run, so this step undoes its own rename.
			if canceled, err := a.canceled(ctx, p); err != nil || canceled {
				if canceled {
					err = errPlanCanceled
				}
				return workflows.ImportOutcome{}, err
			}
			return workflows.ImportOutcome{Size: r.Size, SHA256: r.SHA256, Reconciled: r.Reconciled, Origin: origin}, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.ImportOutcome) error {
			// Canceled since the last check: roll back, so the ledger never
			// records a file that the step is about to remove.
			canceled, err := acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, acquisition.Import)
			if canceled {
				return errPlanCanceled
			}
			return err
		},
	})
	if errors.Is(err, errPlanCanceled) {
		if derr := a.discard(ctx, p); derr != nil {
			return workflows.ImportOutcome{}, derr
		}
		return workflows.ImportOutcome{Canceled: true}, nil
	}
	return out, err
}

// Where a plan's library file came from (importNote.Origin).
const (
	originCreated = "created" // the plan's import wrote it
	originAdopted = "adopted" // the identical file was there already
)

// importNote is what an import attempt records in the ledger, fenced by its
// token, before it writes anything to the target: whether it creates the
// file or adopts the identical one already there, and the size and hash the
// file has then. Compensation removes the library file only when its plan
// created it and it still has that size and hash.
type importNote struct {
	Origin string `json:"origin"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func (a *Activities) importNote(ctx context.Context, p acquisition.Plan) (n importNote, noted bool, err error) {
	noted, err = ledger.ReadNote(ctx, a.pool, p.ID, ledger.OpImport, &n)
	return n, noted, err
}

// claimTarget decides, before anything is written to the plan's target,
// whether the import creates the file or adopts the identical file already
// there, and notes it in the ledger under the attempt's token. An identical
// file that an earlier attempt of this plan created stays created. A
// different file at the target is never overwritten: that cannot heal by
// retrying, so it is non-retryable (a decision).
func (a *Activities) claimTarget(ctx context.Context, p acquisition.Plan, o ledger.Operation) (string, error) {
	prev, noted, err := a.importNote(ctx, p)
	if err != nil {
		return "", err
	}
	n := importNote{Origin: originCreated, Size: p.ExpectedSize, SHA256: p.ExpectedSHA256}
	err = a.files.Verify(ctx, p.TargetPath, p.ExpectedSize, p.ExpectedSHA256)
	switch {
	case err == nil && !(noted && prev.Origin == originCreated):
		n.Origin = originAdopted
	case err == nil, errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, fileimport.ErrMismatch), errors.Is(err, fileimport.ErrInvalidRequest):
		return "", port.NonRetryable(fmt.Errorf("import plan %s: the target already holds a different file, which is never overwritten: %w", p.ID, err))
	default:
		return "", fmt.Errorf("import plan %s: check the target: %w", p.ID, err)
	}
	if err := ledger.Note(ctx, a.pool, o, n); err != nil {
		return "", err
	}
	return n.Origin, nil
}

// importRequest wires the business cancel flag and the heartbeat into the
// chunk loop of the copy.
func (a *Activities) importRequest(ctx context.Context, p acquisition.Plan, source string) ImportRequest {
	var mu sync.Mutex
	var beatErr error
	return ImportRequest{
		Source: source, Target: p.TargetPath, ExpectedSize: p.ExpectedSize, ExpectedSHA256: p.ExpectedSHA256,
		ChunkSize: a.cfg.ChunkSize,
		ShouldStop: func(ctx context.Context) error {
			mu.Lock()
			err := beatErr
			mu.Unlock()
			if err != nil {
				return err
			}
			canceled, err := a.canceled(ctx, p)
			if canceled {
				return errPlanCanceled
			}
			return err
		},
		Progress: func(copied, total int64) {
			if err := port.Heartbeat(ctx, progressOf(copied, total)); err != nil {
				mu.Lock()
				beatErr = err
				mu.Unlock()
			}
		},
	}
}

func (a *Activities) canceled(ctx context.Context, p acquisition.Plan) (bool, error) {
	cur, err := acquisition.GetPlan(ctx, a.pool, p.ID)
	if err != nil {
		return false, err
	}
	return cur.CancelRequested(), nil
}

// discard removes what the plan's import left in the library: its temp
// files, and the target file only when this plan created it (its ledger
// note says so) and the file still has the size and hash noted. A file the
// plan adopted, or one changed since, is left alone.
func (a *Activities) discard(ctx context.Context, p acquisition.Plan) error {
	if err := a.checkTarget(p); err != nil {
		return err
	}
	if err := a.files.RemoveTemps(p.TargetPath); err != nil {
		return fmt.Errorf("remove temp files of plan %s: %w", p.ID, err)
	}
	n, noted, err := a.importNote(ctx, p)
	if err != nil || !noted || n.Origin != originCreated {
		return err
	}
	err = a.files.Verify(ctx, p.TargetPath, n.Size, n.SHA256)
	switch {
	case err == nil:
		return removeTarget(p.TargetPath)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fileimport.ErrMismatch), errors.Is(err, fileimport.ErrInvalidRequest):
		return nil // gone, or no longer the file this plan created
	}
	return fmt.Errorf("check library file of plan %s: %w", p.ID, err)
}

// contentPath is where the downloader put the payload: recorded at
// completion, else asked from the downloader.
func (a *Activities) contentPath(ctx context.Context, p acquisition.Plan) (string, error) {
	d, err := acquisition.GetDownload(ctx, a.pool, p.ID)
	if err != nil {
		return "", err
	}
	if d.ContentPath != "" {
		return d.ContentPath, nil
	}
	t, found, err := a.ownTorrent(ctx, p)
	if err != nil {
		return "", fmt.Errorf("content path of plan %s: %w", p.ID, err)
	}
	if !found || t.ContentPath == "" {
		return "", fmt.Errorf("content path of plan %s: torrent %s unknown to the downloader", p.ID, p.InfoHash)
	}
	return t.ContentPath, nil
}

// VerifyAsset checks the library file against the plan's size and hash; a
// mismatch cannot heal by retrying and goes to the decision centre.
func (a *Activities) VerifyAsset(ctx context.Context, ref workflows.PlanRef) (workflows.Outcome, error) {
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.Outcome{Canceled: canceled}, err
	}
	return ledger.Run(ctx, a.pool, ledger.Fenced[workflows.Outcome]{
		PlanID: p.ID, Op: ledger.OpVerify,
		Do: func(context.Context, ledger.Operation) (workflows.Outcome, error) {
			if err := a.checkTarget(p); err != nil {
				return workflows.Outcome{}, err
			}
			if err := a.files.Verify(ctx, p.TargetPath, p.ExpectedSize, p.ExpectedSHA256); err != nil {
				return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("verify plan %s: %w", p.ID, err))
			}
			return workflows.Outcome{}, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			_, err := acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, acquisition.Verify)
			return err
		},
	})
}
