package activities

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// SubmitDownload adds the plan's torrent to the downloader with the managed
// tag, through the ledger: after an attempt that left no result (a crash, or
// a connection dropped after qBittorrent accepted the add) it reconciles by
// hash and tag instead of adding again.
func (a *Activities) SubmitDownload(ctx context.Context, ref workflows.PlanRef) (workflows.Outcome, error) {
	defer a.keepBeating(ctx)()
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.Outcome{Canceled: canceled}, err
	}
	req, err := addRequest(p, a.saveDir(p.ID))
	if err != nil {
		return workflows.Outcome{}, err
	}
	out, err := ledger.Run(ctx, a.pool, ledger.Fenced[workflows.Outcome]{
		PlanID: p.ID, Op: ledger.OpSubmit,
		Reconcile: func(ctx context.Context, _ ledger.Operation) (workflows.Outcome, bool, error) {
			found, err := a.present(ctx, p)
			return workflows.Outcome{}, found, err
		},
		Do: func(ctx context.Context, _ ledger.Operation) (workflows.Outcome, error) {
			err := a.dl.Add(ctx, req)
			if errors.Is(err, qbittorrent.ErrAddRejected) {
				// "Fails." also means "already present": only the plan's own
				// torrent (carrying its tag) is a success; the same hash
				// without the tag belongs to someone else.
				found, ferr := a.present(ctx, p)
				switch {
				case ferr != nil:
					return workflows.Outcome{}, errors.Join(err, ferr)
				case found:
					return workflows.Outcome{}, nil
				}
				return workflows.Outcome{}, port.NonRetryable(fmt.Errorf("submit plan %s: %w", p.ID, err))
			}
			if errors.Is(err, qbittorrent.ErrInvalidArgument) {
				return workflows.Outcome{}, port.NonRetryable(err)
			}
			return workflows.Outcome{}, err
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			if _, err := acquisition.LockPlan(ctx, tx, p.ID); err != nil { // lock order: see the package doc
				return err
			}
			_, err := acquisition.UpsertDownload(ctx, tx, acquisition.DownloadTask{
				PlanID: p.ID, InfoHash: p.InfoHash, Tag: qbittorrent.ManagedTag(p.ID.String()), SavePath: req.SavePath, State: acquisition.DownloadSubmitted,
			})
			if err != nil {
				return err
			}
			_, err = acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, acquisition.Submit)
			return err
		},
	})
	if err != nil {
		return workflows.Outcome{}, err
	}
	// A cancel that landed while the add was in flight may have compensated
	// before the torrent existed: remove it here too (compensation is
	// idempotent, so doing it twice is harmless).
	if cur, err := acquisition.GetPlan(ctx, a.pool, p.ID); err == nil && cur.CancelRequested() {
		return workflows.Outcome{Canceled: true}, a.removeTorrents(ctx, p)
	}
	return out, nil
}

func addRequest(p acquisition.Plan, saveDir string) (qbittorrent.AddRequest, error) {
	req := qbittorrent.AddRequest{SavePath: saveDir, Tags: []string{qbittorrent.ManagedTag(p.ID.String())}}
	switch p.SourceType {
	case "magnet", "url":
		req.URLs = []string{p.Source}
	case "torrent":
		b, err := base64.StdEncoding.DecodeString(p.Source)
		if err != nil {
			return req, port.NonRetryable(fmt.Errorf("plan %s: decode .torrent: %w", p.ID, err))
		}
		req.Torrent = b
	default:
		return req, port.NonRetryable(fmt.Errorf("plan %s: unknown source type %q", p.ID, p.SourceType))
	}
	return req, nil
}

// present reports whether the downloader holds the plan's torrent: its info
// hash carrying its managed tag. The same hash without the tag belongs to
// someone else (another program, or a person): that is a non-retryable
// error, since adding it again cannot change it, and the plan never touches
// that torrent.
func (a *Activities) present(ctx context.Context, p acquisition.Plan) (bool, error) {
	ts, err := a.dl.Torrents(ctx, qbittorrent.Filter{Hashes: []string{p.InfoHash}})
	if err != nil {
		return false, fmt.Errorf("list torrents of plan %s by hash: %w", p.ID, err)
	}
	tag := qbittorrent.ManagedTag(p.ID.String())
	for _, t := range ts {
		if !t.HasTag(tag) {
			return false, port.NonRetryable(fmt.Errorf("plan %s: torrent %s is in the downloader without the tag %s (tags %q): it is not this plan's",
				p.ID, t.Hash, tag, t.Tags))
		}
	}
	return len(ts) > 0, nil
}

// owned lists the plan's torrents: those carrying its managed tag, and only
// those, whatever their hash.
func (a *Activities) owned(ctx context.Context, p acquisition.Plan) ([]qbittorrent.Torrent, error) {
	ts, err := a.dl.Torrents(ctx, qbittorrent.Filter{Tag: qbittorrent.ManagedTag(p.ID.String())})
	if err != nil {
		return nil, fmt.Errorf("list torrents of plan %s by tag: %w", p.ID, err)
	}
	return ts, nil
}

// ownTorrent is the plan's torrent of its info hash, if the downloader has
// it: filtered by hash and managed tag, so a torrent of the same hash that
// another owner added is never read as the plan's.
func (a *Activities) ownTorrent(ctx context.Context, p acquisition.Plan) (qbittorrent.Torrent, bool, error) {
	ts, err := a.dl.Torrents(ctx, qbittorrent.Filter{Hashes: []string{p.InfoHash}, Tag: qbittorrent.ManagedTag(p.ID.String())})
	if err != nil || len(ts) == 0 {
		return qbittorrent.Torrent{}, false, err
	}
	return ts[0], true, nil
}

// removeTorrents pauses, then deletes with their files, the plan's torrents.
func (a *Activities) removeTorrents(ctx context.Context, p acquisition.Plan) error {
	ts, err := a.owned(ctx, p)
	if err != nil || len(ts) == 0 {
		return err
	}
	hashes := make([]string, 0, len(ts))
	for _, t := range ts {
		hashes = append(hashes, t.Hash)
	}
	// Pausing first stops writes into the save path even if the delete
	// below fails and is retried later.
	if err := a.dl.Pause(ctx, hashes...); err != nil {
		return fmt.Errorf("pause torrents of plan %s: %w", p.ID, err)
	}
	if err := a.dl.Delete(ctx, true, hashes...); err != nil {
		return fmt.Errorf("delete torrents of plan %s: %w", p.ID, err)
	}
	return nil
}

// CheckDownload reads whether the plan's download is complete: first the
// business DB (a completion reported through plans.ReportDownloadComplete),
// then the downloader. Once complete it records completion, moves the plan
// to downloaded and hands on to asset.import in one transaction.
func (a *Activities) CheckDownload(ctx context.Context, ref workflows.PlanRef) (workflows.DownloadState, error) {
	defer a.keepBeating(ctx)()
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.DownloadState{Canceled: canceled}, err
	}
	d, err := acquisition.GetDownload(ctx, a.pool, p.ID)
	if err != nil {
		return workflows.DownloadState{}, err
	}
	done, contentPath, progress := !d.CompletedAt.IsZero(), "", d.Progress
	if t, found, err := a.ownTorrent(ctx, p); err != nil {
		// The business DB stays the truth; an unreachable downloader only
		// means this turn learns nothing new from it.
		a.cfg.Logger.WarnContext(ctx, "check download: downloader unreachable",
			slog.String("plan_id", p.ID.String()), slog.String("error", err.Error()))
	} else if found {
		contentPath, progress = t.ContentPath, t.Progress
		done = done || t.Complete()
	}
	if !done {
		if err := acquisition.SetDownloadProgress(ctx, a.pool, p.ID, progress); err != nil {
			return workflows.DownloadState{}, err
		}
		return workflows.DownloadState{Progress: progress}, nil
	}
	err = dbtx.InTx(ctx, a.pool, func(tx pgx.Tx) error {
		if _, err := acquisition.LockPlan(ctx, tx, p.ID); err != nil { // lock order: see the package doc
			return err
		}
		if _, err := acquisition.CompleteDownload(ctx, tx, p.ID, contentPath); err != nil {
			return err
		}
		canceled, err = acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, acquisition.FinishDownload)
		return err
	})
	if err != nil {
		return workflows.DownloadState{}, fmt.Errorf("record completed download of plan %s: %w", p.ID, err)
	}
	return workflows.DownloadState{Done: !canceled, Canceled: canceled, Progress: 1}, nil
}

// CleanupDownload deletes the torrent and its downloaded files once the
// asset is verified in the library, then completes the plan and hands on to
// notify.webhook. Deleting an absent torrent is a no-op in qBittorrent, so
// a rerun after a crash simply deletes again.
func (a *Activities) CleanupDownload(ctx context.Context, ref workflows.PlanRef) (workflows.Outcome, error) {
	defer a.keepBeating(ctx)()
	p, canceled, err := a.active(ctx, ref.PlanID)
	if err != nil || canceled {
		return workflows.Outcome{Canceled: canceled}, err
	}
	return ledger.Run(ctx, a.pool, ledger.Fenced[workflows.Outcome]{
		PlanID: p.ID, Op: ledger.OpCleanup,
		Do: func(ctx context.Context, _ ledger.Operation) (workflows.Outcome, error) {
			return workflows.Outcome{}, a.removeTorrents(ctx, p)
		},
		Apply: func(ctx context.Context, tx pgx.Tx, _ workflows.Outcome) error {
			if _, err := acquisition.LockPlan(ctx, tx, p.ID); err != nil { // lock order: see the package doc
				return err
			}
			if err := acquisition.SetDownloadState(ctx, tx, p.ID, acquisition.DownloadRemoved); err != nil {
				return err
			}
			_, err := acquisition.HandOff(ctx, tx, a.enqueuer(), p.ID, acquisition.Complete)
			return err
		},
	})
}
