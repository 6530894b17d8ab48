// Package plans is the business API the CLI and /admin use: create a plan,
// approve or reject it, cancel it, report its download complete, read its
// timeline, and list and resolve pending decisions.
//
// Each call validates its input first and writes nothing on bad input. State
// changes are written to the business DB first, with the outbox row of the
// kind that acts on them in the same transaction; signals to waiting runs
// come after the commit and are only wake-up hints (ADR 2.2).
package plans

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stephenafamo/bob"

	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// ErrConflict: the plan (or decision) is in a state that refuses the call,
// e.g. approving a canceled plan. Nothing was written.
var ErrConflict = errors.New("plans: conflicting state")

// Config configures a Service.
type Config struct {
	// LibraryRoot is the absolute directory every target path must lie in.
	// Required.
	LibraryRoot string
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Service is the business API.
type Service struct {
	pool   *pgxpool.Pool
	engine port.TaskEngine
	root   string
	log    *slog.Logger
}

// New returns the API over the business pool and the engine (for signals
// and cancels).
func New(pool *pgxpool.Pool, engine port.TaskEngine, cfg Config) (*Service, error) {
	if pool == nil || engine == nil {
		return nil, errors.New("plans: pool and engine are required")
	}
	if !filepath.IsAbs(cfg.LibraryRoot) {
		return nil, &port.FieldError{Field: "library_root", Reason: fmt.Sprintf("must be an absolute path, got %q", cfg.LibraryRoot)}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{pool: pool, engine: engine, root: filepath.Clean(cfg.LibraryRoot), log: cfg.Logger}, nil
}

// NewPlan is the request to acquire one asset. Exactly one of Magnet,
// TorrentURL and Torrent is set.
type NewPlan struct {
	Title          string
	Magnet         string // magnet:?xt=urn:btih:<hash>...
	TorrentURL     string // http(s) URL of a .torrent file
	Torrent        []byte // a .torrent file
	InfoHash       string // 40 hex digits (v1 info hash)
	TargetPath     string // absolute, inside the library root
	ExpectedSize   int64
	ExpectedSHA256 string // 64 hex digits
}

func invalid(field, format string, args ...any) error {
	return &port.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// validate checks np and returns the plan row to insert.
func (s *Service) validate(np NewPlan) (ledger.Plan, error) {
	p := ledger.Plan{Title: strings.TrimSpace(np.Title), ExpectedSize: np.ExpectedSize}
	if p.Title == "" {
		return p, invalid("title", "must not be empty")
	}
	var err error
	if p.InfoHash, err = hexDigits("info_hash", np.InfoHash, 40); err != nil {
		return p, err
	}
	if p.ExpectedSHA256, err = hexDigits("expected_sha256", np.ExpectedSHA256, 64); err != nil {
		return p, err
	}
	if np.ExpectedSize < 0 {
		return p, invalid("expected_size", "must not be negative, got %d", np.ExpectedSize)
	}
	if p.TargetPath, err = s.target(np.TargetPath); err != nil {
		return p, err
	}
	sources := 0
	for _, set := range []bool{np.Magnet != "", np.TorrentURL != "", len(np.Torrent) > 0} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return p, invalid("source", "exactly one of magnet, torrent URL and torrent file is required, got %d", sources)
	}
	switch {
	case np.Magnet != "":
		if err := checkMagnet(np.Magnet, p.InfoHash); err != nil {
			return p, err
		}
		p.SourceType, p.Source = "magnet", np.Magnet
	case np.TorrentURL != "":
		u, err := url.Parse(np.TorrentURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return p, invalid("torrent_url", "must be an http(s) URL, got %q", np.TorrentURL)
		}
		p.SourceType, p.Source = "url", np.TorrentURL
	default:
		tf, err := qbittorrent.ParseTorrentFile(np.Torrent)
		if err != nil {
			return p, invalid("torrent", "not a .torrent file: %s", err.Error())
		}
		if tf.InfoHash != p.InfoHash {
			return p, invalid("info_hash", "%s does not match the torrent file's %s", p.InfoHash, tf.InfoHash)
		}
		p.SourceType, p.Source = "torrent", base64.StdEncoding.EncodeToString(np.Torrent)
	}
	return p, nil
}

func hexDigits(field, s string, n int) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) != n {
		return "", invalid(field, "must be %d hex digits, got %d characters", n, len(s))
	}
	if _, err := hex.DecodeString(s); err != nil {
		return "", invalid(field, "must be hex digits: %q", s)
	}
	return s, nil
}

func checkMagnet(magnet, hash string) error {
	u, err := url.Parse(magnet)
	if err != nil || u.Scheme != "magnet" {
		return invalid("magnet", "must be a magnet: link")
	}
	btih, ok := strings.CutPrefix(strings.ToLower(u.Query().Get("xt")), "urn:btih:")
	if !ok {
		return invalid("magnet", "has no xt=urn:btih: parameter")
	}
	if btih != hash {
		return invalid("info_hash", "%s does not match the magnet's %s", hash, btih)
	}
	return nil
}

// target checks that path is absolute, clean of traversal and strictly
// inside the library root.
func (s *Service) target(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", invalid("target_path", "must be an absolute path, got %q", path)
	}
	clean := filepath.Clean(path)
	rel, err := filepath.Rel(s.root, clean)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", invalid("target_path", "%q is not inside the library root %q", path, s.root)
	}
	return clean, nil
}

// CreatePlan records a plan awaiting approval and enqueues approval.await
// through the outbox.
func (s *Service) CreatePlan(ctx context.Context, np NewPlan) (ledger.Plan, error) {
	p, err := s.validate(np)
	if err != nil {
		return ledger.Plan{}, fmt.Errorf("create plan: %w", err)
	}
	if p.ID, err = uuid.NewV7(); err != nil {
		return ledger.Plan{}, fmt.Errorf("create plan: new id: %w", err)
	}
	var out ledger.Plan
	err = ledger.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if out, err = ledger.InsertPlan(ctx, tx, p); err != nil {
			return err
		}
		_, err = outbox.Write(ctx, tx, outbox.Event{
			Kind: workflows.KindApprovalAwait, IdempotencyKey: workflows.PlanKey(p.ID.String(), workflows.KindApprovalAwait),
			BusinessKey: p.ID.String(), Payload: workflows.WaitInput{PlanID: p.ID.String()},
		})
		return err
	})
	if err != nil {
		return ledger.Plan{}, fmt.Errorf("create plan: %w", err)
	}
	return out, nil
}

func parseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid(field, "not a UUID: %q", s)
	}
	return id, nil
}

// Approve records the approval of a plan awaiting it, then wakes its
// approval.await run.
func (s *Service) Approve(ctx context.Context, planID, by, note string) error {
	return s.decide(ctx, planID, ledger.Approved, by, note)
}

// Reject records the rejection of a plan awaiting approval.
func (s *Service) Reject(ctx context.Context, planID, by, note string) error {
	return s.decide(ctx, planID, ledger.Rejected, by, note)
}

func (s *Service) decide(ctx context.Context, planID, decision, by, note string) error {
	id, err := parseID("plan_id", planID)
	if err != nil {
		return fmt.Errorf("%s plan: %w", decision, err)
	}
	if strings.TrimSpace(by) == "" {
		return fmt.Errorf("%s plan %s: %w", decision, id, invalid("decided_by", "must not be empty"))
	}
	err = ledger.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if p.Status != ledger.PlanAwaitingApproval || p.CancelRequested() {
			return fmt.Errorf("plan is %s, not awaiting approval: %w", p.Status, ErrConflict)
		}
		aid, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new approval id: %w", err)
		}
		if _, err := ledger.InsertApproval(ctx, tx, ledger.Approval{ID: aid, PlanID: id, Decision: decision, DecidedBy: by, Note: note}); err != nil {
			return err
		}
		status := ledger.PlanApproved
		if decision == ledger.Rejected {
			status = ledger.PlanRejected
		}
		return ledger.SetPlanStatus(ctx, tx, id, status)
	})
	if err != nil {
		return fmt.Errorf("%s plan %s: %w", decision, id, err)
	}
	s.signal(ctx, workflows.ApprovalTopic(id.String()))
	return nil
}

// signal wakes waiters. It is a hint (ADR 2.2): the state is committed
// already, so a failed signal only delays the wake-up to the wait's timeout.
func (s *Service) signal(ctx context.Context, topic port.Topic) {
	if _, err := s.engine.Signal(ctx, topic, nil); err != nil {
		s.log.WarnContext(ctx, "signal failed; the waiter will see the change at its next check",
			slog.String("topic", string(topic)), slog.String("error", err.Error()))
	}
}

// Cancel requests the cancel of a plan (ADR 2.4): it writes the business
// cancel flag and the outbox row of plan.cancel in one transaction, then
// cancels the plan's open runs in the engine. A plan already finished is a
// conflict; canceling twice is a no-op.
func (s *Service) Cancel(ctx context.Context, planID, reason string) error {
	id, err := parseID("plan_id", planID)
	if err != nil {
		return fmt.Errorf("cancel plan: %w", err)
	}
	err = ledger.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if p.Status.Final() {
			return fmt.Errorf("plan is already %s: %w", p.Status, ErrConflict)
		}
		if err := ledger.RequestPlanCancel(ctx, tx, id, reason); err != nil {
			return err
		}
		_, err = outbox.Write(ctx, tx, outbox.Event{
			Kind: workflows.KindPlanCancel, IdempotencyKey: workflows.PlanKey(id.String(), workflows.KindPlanCancel),
			BusinessKey: id.String(), Payload: workflows.CancelInput{PlanID: id.String(), Outcome: workflows.OutcomeCanceled},
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("cancel plan %s: %w", id, err)
	}
	return s.cancelRuns(ctx, id, reason)
}

func (s *Service) cancelRuns(ctx context.Context, id uuid.UUID, reason string) error {
	// Compensation and notifications are left to finish: they are what a
	// cancel starts.
	stmt := openRunsStmt(id, workflows.KindPlanCancel, workflows.KindNotifyWebhook, workflows.KindDecisionResolve)
	sql, args, err := bob.Build(ctx, stmt)
	if err != nil {
		return fmt.Errorf("cancel plan %s: build open runs query: %w", id, err)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("cancel plan %s: list open runs: %w", id, err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("cancel plan %s: list open runs: %w", id, err)
	}
	var errs []error
	for _, r := range runs {
		if err := s.engine.Cancel(ctx, port.RunID(r), reason); err != nil && !errors.Is(err, port.ErrNotFound) {
			errs = append(errs, fmt.Errorf("cancel run %s: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The flag is set and compensation is enqueued: the runs stop at
		// their next check of the flag even without the engine cancel.
		return fmt.Errorf("cancel plan %s: %w", id, err)
	}
	return nil
}

// ReportDownloadComplete records that the download of a plan (by plan id or
// by info hash) finished, then wakes its download.await run. contentPath is
// where the payload is, if the reporter knows it.
func (s *Service) ReportDownloadComplete(ctx context.Context, planIDOrHash, contentPath string) error {
	if contentPath != "" && !filepath.IsAbs(contentPath) {
		return fmt.Errorf("report download: %w", invalid("content_path", "must be an absolute path, got %q", contentPath))
	}
	ids, err := s.resolvePlan(ctx, planIDOrHash)
	if err != nil {
		return fmt.Errorf("report download: %w", err)
	}
	for _, id := range ids {
		err := ledger.InTx(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := ledger.GetDownload(ctx, tx, id); err != nil {
				if errors.Is(err, port.ErrNotFound) {
					return fmt.Errorf("plan %s has not been submitted: %w", id, ErrConflict)
				}
				return err
			}
			_, err := ledger.CompleteDownload(ctx, tx, id, contentPath)
			return err
		})
		if err != nil {
			return fmt.Errorf("report download of plan %s: %w", id, err)
		}
		s.signal(ctx, workflows.DownloadTopic(id.String()))
	}
	return nil
}

// resolvePlan accepts a plan id or an info hash (qBittorrent's "run on
// completion" knows the hash) and returns the plans it names.
func (s *Service) resolvePlan(ctx context.Context, ref string) ([]uuid.UUID, error) {
	if id, err := uuid.Parse(ref); err == nil {
		if _, err := ledger.GetPlan(ctx, s.pool, id); err != nil {
			return nil, err
		}
		return []uuid.UUID{id}, nil
	}
	hash, err := hexDigits("plan", ref, 40)
	if err != nil {
		return nil, invalid("plan", "neither a plan id nor an info hash: %q", ref)
	}
	ps, err := ledger.PlansByHash(ctx, s.pool, hash)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no plan for info hash %s: %w", hash, port.ErrNotFound)
	}
	ids := make([]uuid.UUID, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

// Timeline is a plan and what happened to it, from business tables only.
type Timeline struct {
	Plan    ledger.Plan
	Entries []ledger.TimelineEntry
}

// Timeline returns the business timeline of a plan.
func (s *Service) Timeline(ctx context.Context, planID string) (Timeline, error) {
	id, err := parseID("plan_id", planID)
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	p, err := ledger.GetPlan(ctx, s.pool, id)
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	entries, err := ledger.Timeline(ctx, s.pool, id)
	if err != nil {
		return Timeline{}, err
	}
	return Timeline{Plan: p, Entries: entries}, nil
}

// ListDecisions returns the decisions in status (empty: all), oldest first.
func (s *Service) ListDecisions(ctx context.Context, status ledger.DecisionStatus, limit int) ([]ledger.Decision, error) {
	switch status {
	case "", ledger.DecisionOpen, ledger.DecisionRetry, ledger.DecisionAbandon:
	default:
		return nil, fmt.Errorf("list decisions: %w", invalid("status", "unknown status %q", status))
	}
	if limit < 0 {
		return nil, fmt.Errorf("list decisions: %w", invalid("limit", "must not be negative, got %d", limit))
	}
	if limit == 0 {
		limit = 100
	}
	return ledger.ListDecisions(ctx, s.pool, status, limit)
}

// ResolveDecision resolves an open decision as retry or abandon and enqueues
// decision.resolve, which carries it out.
func (s *Service) ResolveDecision(ctx context.Context, decisionID string, action ledger.DecisionStatus, by string) error {
	id, err := parseID("decision_id", decisionID)
	if err != nil {
		return fmt.Errorf("resolve decision: %w", err)
	}
	if action != ledger.DecisionRetry && action != ledger.DecisionAbandon {
		return fmt.Errorf("resolve decision %s: %w", id, invalid("action", "must be retry or abandon, got %q", action))
	}
	if strings.TrimSpace(by) == "" {
		return fmt.Errorf("resolve decision %s: %w", id, invalid("resolved_by", "must not be empty"))
	}
	err = ledger.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		d, err := ledger.GetDecision(ctx, tx, id)
		if err != nil {
			return err
		}
		resolved, err := ledger.ResolveDecision(ctx, tx, id, action, by)
		if err != nil {
			return err
		}
		if !resolved {
			return fmt.Errorf("decision is already %s: %w", d.Status, ErrConflict)
		}
		_, err = outbox.Write(ctx, tx, outbox.Event{
			Kind: workflows.KindDecisionResolve, IdempotencyKey: "decision:" + id.String() + ":resolve",
			BusinessKey: d.PlanID.String(), Payload: workflows.DecisionRef{DecisionID: id.String()},
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("resolve decision %s: %w", id, err)
	}
	return nil
}
