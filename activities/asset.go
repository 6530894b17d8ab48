package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// ImportProgress is what the import step reports through its heartbeat.
type ImportProgress struct {
	Bytes   int64   `json:"bytes"`
	Total   int64   `json:"total"`
	Percent float64 `json:"percent"`
}

// ImportAsset copies the download into the library through the ledger. After
// an interrupted attempt it reconciles by target path, size and hash. Between
// chunks it checks the business cancel flag (and the heartbeat's verdict)
// and stops itself; a canceled import leaves neither temp nor library file.
func (a *Activities) ImportAsset(ctx context.Context, ref workflows.PlanRef) (workflows.ImportOutcome, error) {
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.ImportOutcome{Canceled: canceled}, err
	}
	res := func(r ImportResult) workflows.ImportOutcome {
		return workflows.ImportOutcome{Size: r.Size, SHA256: r.SHA256, Reconciled: r.Reconciled}
	}
	out, err := ledger.Run(ctx, a.pool, ledger.Fenced[workflows.ImportOutcome]{
		PlanID: p.ID, Op: ledger.OpImport,
		Reconcile: func(context.Context, ledger.Operation) (workflows.ImportOutcome, bool, error) {
			if err := a.files.Verify(p.TargetPath, p.ExpectedSize, p.ExpectedSHA256); err != nil {
				return workflows.ImportOutcome{}, false, nil //nolint:nilerr // not in place yet: import again
			}
			return workflows.ImportOutcome{Size: p.ExpectedSize, SHA256: p.ExpectedSHA256, Reconciled: true}, true, nil
		},
		Do: func(ctx context.Context, _ ledger.Operation) (workflows.ImportOutcome, error) {
			source, err := a.contentPath(ctx, p)
			if err != nil {
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
			return res(r), nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.ImportOutcome) error {
			// Canceled since the last check: roll back, so the ledger never
			// records a file that the step is about to remove.
			canceled, err := handOff(ctx, tx, p.ID, ledger.PlanImported, nextKind(p.ID, workflows.KindAssetVerify, ref))
			if canceled {
				return errPlanCanceled
			}
			return err
		},
	})
	if errors.Is(err, errPlanCanceled) {
		if derr := a.discard(p); derr != nil {
			return workflows.ImportOutcome{}, derr
		}
		return workflows.ImportOutcome{Canceled: true}, nil
	}
	return out, err
}

// importRequest wires the business cancel flag and the heartbeat into the
// chunk loop of the copy.
func (a *Activities) importRequest(ctx context.Context, p ledger.Plan, source string) ImportRequest {
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
			pr := ImportProgress{Bytes: copied, Total: total}
			if total > 0 {
				pr.Percent = 100 * float64(copied) / float64(total)
			}
			if err := port.Heartbeat(ctx, pr); err != nil {
				mu.Lock()
				beatErr = err
				mu.Unlock()
			}
		},
	}
}

func (a *Activities) canceled(ctx context.Context, p ledger.Plan) (bool, error) {
	cur, err := ledger.GetPlan(ctx, a.pool, p.ID)
	if err != nil {
		return false, err
	}
	return cur.CancelRequested(), nil
}

// discard removes what an import of the plan may have left in the library.
func (a *Activities) discard(p ledger.Plan) error {
	return errors.Join(a.files.RemoveTemps(p.TargetPath), removeTarget(p.TargetPath))
}

// contentPath is where the downloader put the payload: recorded at
// completion, else asked from the downloader.
func (a *Activities) contentPath(ctx context.Context, p ledger.Plan) (string, error) {
	d, err := ledger.GetDownload(ctx, a.pool, p.ID)
	if err != nil {
		return "", err
	}
	if d.ContentPath != "" {
		return d.ContentPath, nil
	}
	ts, err := a.dl.Torrents(ctx, qbittorrent.Filter{Hashes: []string{p.InfoHash}})
	if err != nil {
		return "", fmt.Errorf("content path of plan %s: %w", p.ID, err)
	}
	if len(ts) == 0 || ts[0].ContentPath == "" {
		return "", fmt.Errorf("content path of plan %s: torrent %s unknown to the downloader", p.ID, p.InfoHash)
	}
	return ts[0].ContentPath, nil
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
			if err := a.files.Verify(p.TargetPath, p.ExpectedSize, p.ExpectedSHA256); err != nil {
				return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("verify plan %s: %w", p.ID, err))
			}
			return workflows.Outcome{}, nil
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			_, err := handOff(ctx, tx, p.ID, ledger.PlanVerified, nextKind(p.ID, workflows.KindDownloadCleanup, ref))
			return err
		},
	})
}
