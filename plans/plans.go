// Package plans is the business API the CLI and /admin use: create a plan,
// approve or reject it, cancel it, report its download complete, read its
// timeline, and list and resolve pending decisions.
//
// Each call validates its input first and writes nothing on bad input or on
// a state that refuses it. A state change is written to the business DB
// together with the outbox rows of what must follow it (ADR 2.1): the kind
// that acts on it (download.submit after an approval), the wake-up signal of
// a waiting run (ADR 2.2), the cancel of the plan's runs (ADR 2.4). Nothing is called after the commit, so a
// process that dies right after it loses nothing; the outbox dispatcher
// carries the rows out.
//
// Every accepted call returns an Ack saying what it did, or an error saying
// why it did nothing: a repeated approve or cancel is idempotent and says so.
package plans

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/fileimport"
	"github.com/taskport/taskport/internal/dbtx"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/internal/timeline"
	"github.com/taskport/taskport/ledger"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/qbittorrent"
	"github.com/taskport/taskport/workflows"
)

// ErrConflict: the plan (or decision) is in a state that refuses the call,
// e.g. approving a canceled plan, or a target path another plan holds.
// Nothing was written. It is the lifecycle's acquisition.ErrConflict; the
// concrete error is often an *acquisition.TransitionError or TakenError.
var ErrConflict = acquisition.ErrConflict

// Config configures a Service.
type Config struct {
	// LibraryRoot is the absolute directory every target path must lie in.
	// Required to create plans; a Service without one (the decision
	// commands, which never see a target path) refuses CreatePlan.
	LibraryRoot string
	// DownloadDir is the absolute directory the downloader saves into.
	// When set, a reported content path must lie in it; the worker checks
	// it again with symlinks resolved before it reads anything.
	DownloadDir string
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Service is the business API.
type Service struct {
	pool      *pgxpool.Pool
	root      string
	downloads string
	log       *slog.Logger
}

// Validate checks cfg as New does, without a pool, so that a caller can
// refuse a bad Config before it connects (the CLI, as a usage error). The
// error is a *port.FieldError naming the field.
func (cfg Config) Validate() error {
	for field, dir := range map[string]string{"library_root": cfg.LibraryRoot, "download_dir": cfg.DownloadDir} {
		if dir != "" && !filepath.IsAbs(dir) {
			return &port.FieldError{Field: field, Reason: fmt.Sprintf("must be an absolute path, got %q", dir)}
		}
	}
	return nil
}

// New returns the API over the business pool. It needs no engine: what
// follows a change goes through the outbox.
func New(pool *pgxpool.Pool, cfg Config) (*Service, error) {
	if pool == nil {
		return nil, errors.New("plans: pool is required")
	}
	if err := dbtx.CheckPool(pool); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LibraryRoot != "" {
		cfg.LibraryRoot = filepath.Clean(cfg.LibraryRoot)
	}
	if cfg.DownloadDir != "" {
		cfg.DownloadDir = filepath.Clean(cfg.DownloadDir)
	}
	return &Service{pool: pool, root: cfg.LibraryRoot, downloads: cfg.DownloadDir, log: cfg.Logger}, nil
}

// Ack is what an accepted call did, in words for the operator (the CLI and
// /admin show it).
type Ack struct {
	// Already is true when an earlier call had the same effect, so this one
	// changed nothing in the plan (it may repeat an idempotent hint).
	Already bool
	Message string
}

func (a Ack) String() string { return a.Message }

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
	// IdempotencyKey, when set, makes the create retryable: a create with
	// a key already recorded returns the plan created with it and writes
	// nothing (the rest of the request is not compared). Derive it from the
	// request's meaning, never from time or randomness.
	IdempotencyKey string
}

// MaxIdempotencyKey bounds NewPlan.IdempotencyKey, in characters.
const MaxIdempotencyKey = 200

func invalid(field, format string, args ...any) error {
	return &port.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Bounds of the free-text fields, in characters: a note or a title is read
// on a page, not stored as a document.
const (
	MaxTitle = 300
	MaxNote  = 1000 // a note or a reason
	MaxActor = 200  // who acted
)

// What free text may hold besides valid UTF-8 without U+0000 (which
// Postgres refuses in text, answering SQLSTATE 22021): a one-line field (a
// title, who acted, a search, a source) no control character at all, since
// the CLI prints it to an operator's terminal, where one is an escape code;
// a multi-line one (a note, a reason) a line feed and a tab, and no other.
const (
	oneLine   = ""
	multiLine = "\n\t"
)

// checkNote checks a note or a reason: multi-line text, bounded.
func checkNote(field, s string) error {
	return enginekit.ValidateBoundedLine(field, s, multiLine, MaxNote)
}

// actor checks who acts: required, one line, and bounded.
func actor(field, by string) error {
	if strings.TrimSpace(by) == "" {
		return invalid(field, "must not be empty")
	}
	return enginekit.ValidateBoundedLine(field, by, oneLine, MaxActor)
}

// CheckNewPlan applies CreatePlan's checks of np, none of which needs the
// database, for a service whose Config.LibraryRoot is libraryRoot, so that a
// caller refuses a careless request before it connects (the CLI, as a usage
// error naming the flag). The error is a *port.FieldError naming the field.
// CreatePlan applies them again.
func CheckNewPlan(libraryRoot string, np NewPlan) error {
	if err := (Config{LibraryRoot: libraryRoot}).Validate(); err != nil {
		return err
	}
	if libraryRoot != "" {
		libraryRoot = filepath.Clean(libraryRoot)
	}
	_, err := validatePlan(libraryRoot, np)
	return err
}

// validatePlan checks np for the library at root (clean, or "" when the
// service creates no plans) and returns the plan row to insert.
func validatePlan(root string, np NewPlan) (acquisition.Plan, error) {
	p := acquisition.Plan{Title: strings.TrimSpace(np.Title), ExpectedSize: np.ExpectedSize, CreateKey: np.IdempotencyKey}
	if err := enginekit.ValidateBoundedLine("idempotency_key", p.CreateKey, oneLine, MaxIdempotencyKey); err != nil {
		return p, err
	}
	if p.Title == "" {
		return p, invalid("title", "must not be empty")
	}
	if err := enginekit.ValidateBoundedLine("title", p.Title, oneLine, MaxTitle); err != nil {
		return p, err
	}
	// The sources are stored as given: url.Parse refuses ASCII control
	// characters but lets invalid UTF-8 and C1 controls through.
	if err := cmp.Or(enginekit.ValidateLine("magnet", np.Magnet, oneLine), enginekit.ValidateLine("torrent_url", np.TorrentURL, oneLine)); err != nil {
		return p, err
	}
	var err error
	hash := np.InfoHash
	if strings.TrimSpace(hash) == "" {
		// Optional where the source names it: the magnet's btih or the
		// torrent file's info dictionary.
		if hash, err = sourceHash(np); err != nil {
			return p, err
		}
	}
	if p.InfoHash, err = hexDigits("info_hash", hash, 40); err != nil {
		return p, err
	}
	if p.ExpectedSHA256, err = hexDigits("expected_sha256", np.ExpectedSHA256, 64); err != nil {
		return p, err
	}
	if np.ExpectedSize < 0 {
		return p, invalid("expected_size", "must not be negative, got %d", np.ExpectedSize)
	}
	if p.TargetPath, err = target(root, np.TargetPath); err != nil {
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

// sourceHash is the info hash a plan's source names, for a plan created
// without one: a magnet's btih, a torrent file's own; a torrent URL names
// none (it is fetched only at download time).
func sourceHash(np NewPlan) (string, error) {
	switch {
	case np.Magnet != "":
		return magnetHash(np.Magnet)
	case len(np.Torrent) > 0:
		tf, err := qbittorrent.ParseTorrentFile(np.Torrent)
		if err != nil {
			return "", invalid("torrent", "not a .torrent file: %s", err.Error())
		}
		return tf.InfoHash, nil
	}
	return "", invalid("info_hash", "must be given with a torrent URL (40 hex digits)")
}

// magnetHash is the btih of a magnet link, lower case.
func magnetHash(magnet string) (string, error) {
	u, err := url.Parse(magnet)
	if err != nil || u.Scheme != "magnet" {
		return "", invalid("magnet", "must be a magnet: link")
	}
	btih, ok := strings.CutPrefix(strings.ToLower(u.Query().Get("xt")), "urn:btih:")
	if !ok {
		return "", invalid("magnet", "has no xt=urn:btih: parameter")
	}
	return btih, nil
}

func checkMagnet(magnet, hash string) error {
	btih, err := magnetHash(magnet)
	if err != nil {
		return err
	}
	if btih != hash {
		return invalid("info_hash", "%s does not match the magnet's %s", hash, btih)
	}
	return nil
}

// maxPathComponent is the name limit of Linux filesystems (NAME_MAX), in
// bytes: a longer directory name in a target could never be created.
const maxPathComponent = 255

// target checks that path is absolute, clean of traversal, strictly inside
// the library root, and a name the import can create: valid UTF-8 without
// control characters, no directory name over maxPathComponent bytes and a
// file name of at most fileimport.MaxTargetName bytes (its temporary file's
// name must fit too). Anything else would pass creation and fail only at
// import, after the download.
func target(root, path string) (string, error) {
	if root == "" {
		return "", invalid("library_root", "not configured: this service cannot create plans")
	}
	if err := enginekit.ValidateLine("target_path", path, oneLine); err != nil {
		return "", err
	}
	if !filepath.IsAbs(path) {
		return "", invalid("target_path", "must be an absolute path, got %q", path)
	}
	clean := filepath.Clean(path)
	if !inside(root, clean) {
		return "", invalid("target_path", "%q is not inside the library root %q", path, root)
	}
	dirs := strings.Split(filepath.Dir(clean), string(filepath.Separator))
	for _, d := range dirs {
		if len(d) > maxPathComponent {
			return "", invalid("target_path", "directory name %.40q... is %d bytes, at most %d", d, len(d), maxPathComponent)
		}
	}
	if base := filepath.Base(clean); len(base) > fileimport.MaxTargetName {
		return "", invalid("target_path", "file name %.40q... is %d bytes, at most %d", base, len(base), fileimport.MaxTargetName)
	}
	return clean, nil
}

// inside reports whether the clean absolute path lies strictly inside dir.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// CreatePlan records a plan awaiting approval; nothing runs until it is
// approved (Approve hands it to download.submit). A target path or info hash that another plan holds
// (acquisition.Status.HoldsTarget, HoldsInfoHash) is refused with an
// *acquisition.TakenError naming that plan, and nothing is written; a unique
// index backs the check, so two concurrent creates cannot both pass it.
func (s *Service) CreatePlan(ctx context.Context, np NewPlan) (acquisition.Plan, error) {
	p, err := validatePlan(s.root, np)
	if err != nil {
		return acquisition.Plan{}, fmt.Errorf("create plan: %w", err)
	}
	if p.ID, err = uuid.NewV7(); err != nil {
		return acquisition.Plan{}, fmt.Errorf("create plan: new id: %w", err)
	}
	out, err := acquisition.CreatePlan(ctx, s.pool, p)
	if err != nil {
		return acquisition.Plan{}, fmt.Errorf("create plan: %w", err)
	}
	return out, nil
}

// CheckResolution applies ResolveDecision's checks that need no database,
// so that a caller refuses a careless request before it connects. The error
// is a *port.FieldError naming the field.
func CheckResolution(decisionID string, action acquisition.DecisionStatus, by string) error {
	if _, err := parseID("decision_id", decisionID); err != nil {
		return err
	}
	if action != acquisition.DecisionRetry && action != acquisition.DecisionAbandon {
		return invalid("action", "must be retry or abandon, got %q", action)
	}
	return actor("resolved_by", by)
}

// CheckDecision applies the checks of Approve and Reject that need no
// database, as CheckResolution does for ResolveDecision.
func CheckDecision(planID, by, note string) error {
	if _, err := parseID("plan_id", planID); err != nil {
		return err
	}
	return cmp.Or(actor("decided_by", by), checkNote("note", note))
}

// CheckCancel applies the checks of Cancel that need no database, as
// CheckResolution does for ResolveDecision.
func CheckCancel(planID, by, reason string) error {
	if _, err := parseID("plan_id", planID); err != nil {
		return err
	}
	return cmp.Or(actor("canceled_by", by), checkNote("reason", reason))
}

func parseID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid(field, "not a UUID: %q", s)
	}
	return id, nil
}

// Approve records the approval of a plan awaiting it and, in the same
// transaction, the outbox row of download.submit: the approval is taken
// here, once (acquisition.Decide), and no run waits for it. Approving an
// approved plan again changes nothing and says so.
func (s *Service) Approve(ctx context.Context, planID, by, note string) (Ack, error) {
	return s.decide(ctx, planID, acquisition.Approve, by, note)
}

// Reject records the rejection of a plan awaiting approval; nothing runs
// after it.
func (s *Service) Reject(ctx context.Context, planID, by, note string) (Ack, error) {
	return s.decide(ctx, planID, acquisition.Reject, by, note)
}

// decide records the approval that takes t (Approve or Reject); the
// approval's decision is the status t moves the plan to. An error means
// nothing was decided, so it names the operation by t's verb ("reject plan
// X: ..."), not by the status the plan did not reach.
func (s *Service) decide(ctx context.Context, planID string, t acquisition.Transition, by, note string) (Ack, error) {
	decision := t.To()
	id, err := parseID("plan_id", planID)
	if err != nil {
		return Ack{}, fmt.Errorf("%s plan: %w", t.Name(), err)
	}
	if err := CheckDecision(planID, by, note); err != nil {
		return Ack{}, fmt.Errorf("%s plan %s: %w", t.Name(), id, err)
	}
	var ack Ack
	err = dbtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := acquisition.LockPlan(ctx, tx, id); err != nil {
			return err
		}
		prev, found, err := acquisition.GetApproval(ctx, tx, id)
		switch {
		case err != nil:
			return err
		case found && prev.Decision == decision:
			ack = Ack{Already: true, Message: fmt.Sprintf("plan %s was already %s by %s at %s", id, decision, prev.DecidedBy,
				prev.CreatedAt.UTC().Format("2006-01-02 15:04:05"))}
			return nil
		case found:
			return fmt.Errorf("plan was %s by %s: %w", prev.Decision, prev.DecidedBy, ErrConflict)
		}
		aid, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new approval id: %w", err)
		}
		if err := acquisition.Decide(ctx, tx, t, acquisition.Approval{ID: aid, PlanID: id, Decision: decision, DecidedBy: by, Note: note}); err != nil {
			return err
		}
		ack = Ack{Message: fmt.Sprintf("plan %s %s by %s", id, decision, by)}
		return nil
	})
	if err != nil {
		return Ack{}, fmt.Errorf("%s plan %s: %w", t.Name(), id, err)
	}
	return ack, nil
}

// Cancel requests the cancel of a plan (ADR 2.4): in one transaction it
// writes the business cancel flag (the plan moves to canceling), the outbox
// row of plan.cancel, which compensates and ends the plan, and the row that
// cancels the plan's open runs in the engine. A final plan refuses it with an
// *acquisition.TransitionError. A plan already canceling answers
// Already and cancels its open runs again, unless its compensation failed:
// then the error names the decision to resolve. by is who asks; the plan
// records the first requester with the first reason.
func (s *Service) Cancel(ctx context.Context, planID, by, reason string) (Ack, error) {
	id, err := parseID("plan_id", planID)
	if err != nil {
		return Ack{}, fmt.Errorf("cancel plan: %w", err)
	}
	if err := CheckCancel(planID, by, reason); err != nil {
		return Ack{}, fmt.Errorf("cancel plan %s: %w", id, err)
	}
	var ack Ack
	err = dbtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		p, err := acquisition.LockPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		if p.Status == acquisition.Canceling {
			if err := compensationStuck(ctx, tx, id); err != nil {
				return err
			}
			ack = Ack{Already: true, Message: fmt.Sprintf("plan %s is already canceling since %s (%s); its open runs are canceled again",
				id, p.CancelRequestedAt.UTC().Format("2006-01-02 15:04:05"), p.CancelReason)}
		} else {
			if _, err := acquisition.RequestCancel(ctx, tx, id, by, reason); err != nil {
				return err
			}
			compensate := acquisition.Compensation(id.String(), workflows.PlanKey(id.String(), workflows.KindPlanCancel), workflows.OutcomeCanceled)
			if _, err := outbox.Write(ctx, tx, compensate); err != nil {
				return err
			}
			ack = Ack{Message: fmt.Sprintf("plan %s canceling (by %s): its runs are canceled and plan.cancel compensates", id, by)}
		}
		cancelRuns, err := acquisition.CancelRuns(id.String(), reason)
		if err != nil {
			return err
		}
		_, err = outbox.Write(ctx, tx, cancelRuns)
		return err
	})
	if err != nil {
		return Ack{}, fmt.Errorf("cancel plan %s: %w", id, err)
	}
	return ack, nil
}

// compensationStuck is the error of a canceling plan whose compensation
// failed for good: another cancel cannot help, resolving its decision can.
func compensationStuck(ctx context.Context, q acquisition.DBTX, id uuid.UUID) error {
	open, err := acquisition.OpenDecisionsOf(ctx, q, id)
	if err != nil {
		return err
	}
	for _, d := range open {
		if d.Kind == workflows.KindPlanCancel {
			return fmt.Errorf("plan is canceling, but its compensation failed: resolve decision %s (retry or abandon): %w", d.ID, ErrConflict)
		}
	}
	return nil
}

// ReportDownloadComplete records that the download of a plan (by plan id, or
// by info hash: the plan that holds it, else the newest with it) finished,
// and the wake-up of its download.await run. contentPath is where the
// payload is, if the reporter knows it. A download recorded complete before
// changes nothing and says so.
func (s *Service) ReportDownloadComplete(ctx context.Context, planIDOrHash, contentPath string) (Ack, error) {
	// Only what Postgres text cannot store is refused: a file name may hold
	// control characters, and the download it names must still complete.
	if err := enginekit.ValidateText("content_path", contentPath); err != nil {
		return Ack{}, fmt.Errorf("report download: %w", err)
	}
	if contentPath != "" && !filepath.IsAbs(contentPath) {
		return Ack{}, fmt.Errorf("report download: %w", invalid("content_path", "must be an absolute path, got %q", contentPath))
	}
	if contentPath != "" && s.downloads != "" && !inside(s.downloads, filepath.Clean(contentPath)) {
		return Ack{}, fmt.Errorf("report download: %w", invalid("content_path", "%q is not inside the download directory %q", contentPath, s.downloads))
	}
	id, err := s.resolvePlan(ctx, planIDOrHash)
	if err != nil {
		return Ack{}, fmt.Errorf("report download: %w", err)
	}
	var ack Ack
	err = dbtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		d, err := acquisition.GetDownload(ctx, tx, id)
		if errors.Is(err, port.ErrNotFound) {
			return fmt.Errorf("plan %s has not been submitted: %w", id, ErrConflict)
		}
		if err != nil {
			return err
		}
		changed, err := acquisition.CompleteDownload(ctx, tx, id, contentPath)
		if err != nil {
			return err
		}
		if !changed {
			ack = Ack{Already: true, Message: fmt.Sprintf("download of plan %s is %s already", id, d.State)}
			return nil
		}
		_, err = outbox.Write(ctx, tx, acquisition.Wake(id.String(), workflows.DownloadTopic(id.String()), "download:"+d.ID.String()+":completed"))
		ack = Ack{Message: fmt.Sprintf("download of plan %s recorded complete", id)}
		return err
	})
	if err != nil {
		return Ack{}, fmt.Errorf("report download of plan %s: %w", id, err)
	}
	return ack, nil
}

// resolvePlan accepts a plan id or an info hash (qBittorrent's "run on
// completion" knows the hash) and returns the plan it names: for a hash, the
// plan that holds it, else the newest plan with it.
func (s *Service) resolvePlan(ctx context.Context, ref string) (uuid.UUID, error) {
	if id, err := uuid.Parse(ref); err == nil {
		if _, err := acquisition.GetPlan(ctx, s.pool, id); err != nil {
			return uuid.Nil, err
		}
		return id, nil
	}
	hash, err := hexDigits("plan", ref, 40)
	if err != nil {
		return uuid.Nil, invalid("plan", "neither a plan id nor an info hash: %q", ref)
	}
	ps, err := acquisition.PlansByHash(ctx, s.pool, hash)
	if err != nil {
		return uuid.Nil, err
	}
	if len(ps) == 0 {
		return uuid.Nil, fmt.Errorf("no plan for info hash %s: %w", hash, port.ErrNotFound)
	}
	for _, p := range ps {
		if p.Status.HoldsInfoHash() {
			return p.ID, nil
		}
	}
	return ps[len(ps)-1].ID, nil
}

// TimelineEntry is one line of a plan's business timeline.
type TimelineEntry = timeline.Entry

// Timeline is a plan and what happened to it, from business tables only.
type Timeline struct {
	Plan    acquisition.Plan
	Entries []TimelineEntry
}

// Timeline returns the business timeline of a plan (ADR 2.7): each owner of
// a business table reads its own lines (acquisition: the plan, approval,
// download and decisions; ledger: operations; outbox: hand-offs), in one
// read-only snapshot, and they are merged oldest first.
func (s *Service) Timeline(ctx context.Context, planID string) (Timeline, error) {
	id, err := parseID("plan_id", planID)
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	var tl Timeline
	snapshot := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err = pgx.BeginTxFunc(ctx, s.pool, snapshot, func(tx pgx.Tx) error {
		p, err := acquisition.GetPlan(ctx, tx, id)
		if err != nil {
			return err
		}
		rows, err := acquisition.Timeline(ctx, tx, id)
		if err != nil {
			return err
		}
		ops, err := ledger.Timeline(ctx, tx, id)
		if err != nil {
			return err
		}
		handoffs, err := outbox.Timeline(ctx, tx, id.String())
		if err != nil {
			return err
		}
		tl = Timeline{Plan: p, Entries: timeline.Merge(rows, ops, handoffs)}
		return nil
	})
	if err != nil {
		return Timeline{}, fmt.Errorf("timeline: %w", err)
	}
	return tl, nil
}

// PlanQuery asks for a page of the plans list.
type PlanQuery struct {
	// Status is a plan status, or empty for every status.
	Status acquisition.Status
	// Search is a plan id, an info hash (40 hex digits), or part of a
	// title (case ignored); empty matches every plan.
	Search string
	// After is the Next of the previous page; empty for the first page.
	After string
	// Limit is the page size: default 50, at most MaxPage.
	Limit int
}

// MaxPage bounds a page of the plans list.
const MaxPage = 500

// PlanPage is a page of plans, newest first.
type PlanPage struct {
	Plans []acquisition.Plan
	// Next is the cursor of the following page; empty on the last one.
	Next string
}

// ListPlans returns a page of the plans q selects, newest first. The page
// follows a cursor, not an offset, so a deep page costs what the first does.
func (s *Service) ListPlans(ctx context.Context, q PlanQuery) (PlanPage, error) {
	f := acquisition.PlanFilter{Status: q.Status, Limit: cmp.Or(q.Limit, 50)}
	if q.Status != "" && !slices.Contains(acquisition.Statuses(), q.Status) {
		return PlanPage{}, fmt.Errorf("list plans: %w", invalid("status", "unknown status %q", q.Status))
	}
	if f.Limit < 1 || f.Limit > MaxPage {
		return PlanPage{}, fmt.Errorf("list plans: %w", invalid("limit", "must be 1 to %d, got %d", MaxPage, q.Limit))
	}
	search := strings.TrimSpace(q.Search)
	if err := enginekit.ValidateBoundedLine("search", search, oneLine, MaxTitle); err != nil {
		return PlanPage{}, fmt.Errorf("list plans: %w", err)
	}
	if id, err := uuid.Parse(search); err == nil {
		f.ID = id
	} else if hash, err := hexDigits("search", search, 40); err == nil {
		f.InfoHash = hash
	} else {
		f.TitleContains = search
	}
	if q.After != "" {
		var err error
		if f.After, err = parseCursor(q.After); err != nil {
			return PlanPage{}, fmt.Errorf("list plans: %w", err)
		}
	}
	want := f.Limit
	f.Limit++ // one more says whether a next page exists
	ps, err := acquisition.ListPlans(ctx, s.pool, f)
	if err != nil {
		return PlanPage{}, err
	}
	page := PlanPage{Plans: ps}
	if len(ps) > want {
		page.Plans = ps[:want]
		page.Next = formatCursor(ps[want-1].Cursor())
	}
	return page, nil
}

// A cursor is the last plan's creation time and id: "<RFC 3339>~<uuid>".
func formatCursor(c acquisition.PlanCursor) string {
	return c.CreatedAt.UTC().Format(time.RFC3339Nano) + "~" + c.ID.String()
}

func parseCursor(s string) (acquisition.PlanCursor, error) {
	at, id, ok := strings.Cut(s, "~")
	t, terr := time.Parse(time.RFC3339Nano, at)
	u, uerr := uuid.Parse(id)
	if !ok || terr != nil || uerr != nil {
		return acquisition.PlanCursor{}, invalid("after", "not a page cursor: %q", s)
	}
	return acquisition.PlanCursor{CreatedAt: t, ID: u}, nil
}

// ListDecisions returns the decisions in status (empty: all), oldest first.
func (s *Service) ListDecisions(ctx context.Context, status acquisition.DecisionStatus, limit int) ([]acquisition.Decision, error) {
	switch status {
	case "", acquisition.DecisionOpen, acquisition.DecisionRetry, acquisition.DecisionAbandon:
	default:
		return nil, fmt.Errorf("list decisions: %w", invalid("status", "unknown status %q", status))
	}
	if limit < 0 {
		return nil, fmt.Errorf("list decisions: %w", invalid("limit", "must not be negative, got %d", limit))
	}
	if limit == 0 {
		limit = 100
	}
	return acquisition.ListDecisions(ctx, s.pool, status, limit)
}

// Decision returns one decision.
func (s *Service) Decision(ctx context.Context, decisionID string) (acquisition.Decision, error) {
	id, err := parseID("decision_id", decisionID)
	if err != nil {
		return acquisition.Decision{}, fmt.Errorf("decision: %w", err)
	}
	return acquisition.GetDecision(ctx, s.pool, id)
}

// ResolveDecision resolves an open decision as retry or abandon and enqueues
// decision.resolve, which carries it out (acquisition.RetryEffect and
// AbandonEffect say what that does; the Ack repeats it). A retry that cannot
// run (a main-chain kind on a plan with a cancel request, a compensation of a
// plan that ended) is refused here, with the decision left open and nothing
// written, rather than acknowledged and then dropped.
func (s *Service) ResolveDecision(ctx context.Context, decisionID string, action acquisition.DecisionStatus, by string) (Ack, error) {
	id, err := parseID("decision_id", decisionID)
	if err != nil {
		return Ack{}, fmt.Errorf("resolve decision: %w", err)
	}
	if err := CheckResolution(decisionID, action, by); err != nil {
		return Ack{}, fmt.Errorf("resolve decision %s: %w", id, err)
	}
	var ack Ack
	err = dbtx.InTx(ctx, s.pool, func(tx pgx.Tx) error {
		d, err := acquisition.GetDecision(ctx, tx, id)
		if err != nil {
			return err
		}
		if d.Status == action {
			// The same resolution again, as a repeated approve: it is in
			// effect, and nothing more is written.
			ack = Ack{Already: true, Message: fmt.Sprintf("decision %s (%s) was already resolved as %s by %s at %s",
				id, d.Kind, action, d.ResolvedBy, d.ResolvedAt.UTC().Format(time.RFC3339))}
			return nil
		}
		if d.Status != acquisition.DecisionOpen {
			return fmt.Errorf("decision is already %s: %w", d.Status, ErrConflict)
		}
		p, err := acquisition.LockPlan(ctx, tx, d.PlanID)
		if err != nil {
			return err
		}
		var effect string
		if action == acquisition.DecisionRetry {
			if _, effect, err = acquisition.RetryEffect(d.Kind, p); err != nil {
				return err
			}
		} else {
			_, effect = acquisition.AbandonEffect(d.Kind, p)
		}
		resolved, err := acquisition.ResolveDecision(ctx, tx, id, action, by)
		if err != nil {
			return err
		}
		if !resolved {
			return fmt.Errorf("decision was resolved concurrently: %w", ErrConflict)
		}
		_, err = outbox.Write(ctx, tx, acquisition.Enqueue(workflows.KindDecisionResolve, "decision:"+id.String()+":resolve",
			d.PlanID.String(), workflows.DecisionRef{DecisionID: id.String()}))
		ack = Ack{Message: fmt.Sprintf("decision %s (%s) resolved as %s: %s", id, d.Kind, action, effect)}
		return err
	})
	if err != nil {
		return Ack{}, fmt.Errorf("resolve decision %s: %w", id, err)
	}
	return ack, nil
}
