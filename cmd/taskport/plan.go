package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/codes"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/cmd/internal/stack"
	"github.com/taskport/taskport/internal/enginekit"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
)

// withPlans runs fn with the business API over the business pool alone:
// these commands write business rows and their outbox rows, and what must
// follow (a run, a wake-up, a cancel) goes through the outbox, so they need
// no engine and dial no Temporal server. cfg's directories may be empty
// where the command does not need them. fn runs inside the command's span ("plan approve"),
// through cmd.Context(), so that the outbox rows it writes start the trace
// the dispatcher and the engine continue.
func withPlans(cmd *cobra.Command, g *stack.Globals, cfg plans.Config, fn func(*plans.Service) error) error {
	// cfg's directories are the command line's (--library-root,
	// --download-dir, named after cfg's fields): refused before anything
	// connects, by the check plans.New applies.
	var fe *port.FieldError
	if errors.As(cfg.Validate(), &fe) {
		return usageError{Err: fmt.Errorf("--%s %s", strings.ReplaceAll(fe.Field, "_", "-"), fe.Reason)}
	}
	return g.WithPool(cmd.Context(), func(pool *pgxpool.Pool, log *slog.Logger) (err error) {
		tr, err := g.StartTracing(cmd.Context(), log)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, tr.Shutdown(context.WithoutCancel(cmd.Context()))) }()
		ctx, span := tr.Command(cmd.Context(), strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "))
		defer func() {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		cmd.SetContext(ctx)
		cfg.Logger = log
		svc, err := plans.New(pool, cfg)
		if err != nil {
			return err
		}
		return fn(svc)
	})
}

func newPlanCmd(g *stack.Globals) *cobra.Command {
	var root string
	cmd := &cobra.Command{Use: "plan", Short: "Create, approve, cancel and inspect acquisition plans (the business API; needs only the database)"}
	stack.BindLibraryRoot(cmd.PersistentFlags(), &root)

	var np plans.NewPlan
	var torrentFile string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a plan; it then waits for approval",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if torrentFile != "" {
				b, err := os.ReadFile(torrentFile)
				if err != nil {
					return fmt.Errorf("--torrent-file: %w", err)
				}
				np.Torrent = b
			}
			if err := checkNewPlan(root, np); err != nil {
				return flagError(err)
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				p, err := svc.CreatePlan(cmd.Context(), np)
				if err != nil {
					return flagError(err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), p.ID)
				return nil
			})
		},
	}
	f := create.Flags()
	f.StringVar(&np.Title, "title", "", "what is acquired")
	f.StringVar(&np.Magnet, "magnet", "", "magnet link")
	f.StringVar(&np.TorrentURL, "torrent-url", "", "http(s) URL of a .torrent")
	f.StringVar(&torrentFile, "torrent-file", "", "a .torrent file")
	f.StringVar(&np.InfoHash, "info-hash", "", "40 hex digits; by default the magnet's or the torrent file's")
	f.StringVar(&np.TargetPath, "target", "", "absolute path inside the library root")
	f.Int64Var(&np.ExpectedSize, "size", 0, "expected size in bytes")
	f.StringVar(&np.ExpectedSHA256, "sha256", "", "expected SHA-256, 64 hex digits")
	f.StringVar(&np.IdempotencyKey, "idempotency-key", "", "makes the create retryable: a create with a key already recorded prints that plan and writes nothing")

	var by, note, reason, contentPath, downloads string
	var asJSON bool
	approve := &cobra.Command{
		Use: "approve PLAN", Short: "Approve a plan (prints what happened; approving twice says so)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkActor(by); err != nil {
				return err
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				return printAck(cmd)(svc.Approve(cmd.Context(), args[0], by, note))
			})
		},
	}
	reject := &cobra.Command{
		Use: "reject PLAN", Short: "Reject a plan", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkActor(by); err != nil {
				return err
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				return printAck(cmd)(svc.Reject(cmd.Context(), args[0], by, note))
			})
		},
	}
	for _, sub := range []*cobra.Command{approve, reject} {
		bindActor(sub, &by)
		sub.Flags().StringVar(&note, "note", "", "why")
	}
	cancel := &cobra.Command{
		Use: "cancel PLAN",
		Short: "Cancel a plan: the flag, its compensation and the cancel of its runs are committed together; " +
			"prints what happened, or fails saying why nothing did",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkActor(by); err != nil {
				return err
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				return printAck(cmd)(svc.Cancel(cmd.Context(), args[0], by, reason))
			})
		},
	}
	bindActor(cancel, &by)
	cancel.Flags().StringVar(&reason, "reason", "canceled from the CLI", "why")
	complete := &cobra.Command{
		Use:   "complete PLAN-OR-INFO-HASH",
		Short: "Report a download complete (qBittorrent's run-on-finish hook: taskport plan complete %I --content-path \"%F\")",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPlans(cmd, g, plans.Config{LibraryRoot: root, DownloadDir: downloads}, func(svc *plans.Service) error {
				return printAck(cmd)(svc.ReportDownloadComplete(cmd.Context(), args[0], contentPath))
			})
		},
	}
	complete.Flags().StringVar(&contentPath, "content-path", "", "where the payload is: inside --download-dir")
	complete.Flags().StringVar(&downloads, "download-dir", stack.EnvOr("DOWNLOAD_DIR", "/downloads"), "absolute directory qBittorrent saves into (env DOWNLOAD_DIR)")
	timeline := &cobra.Command{
		Use: "timeline PLAN", Short: "Print a plan's business timeline", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				tl, err := svc.Timeline(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jsonTimeline(tl))
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "%s\t%s\t%s\n", tl.Plan.ID, tl.Plan.Status, tl.Plan.Title)
				for _, e := range tl.Entries {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05"), e.Source, e.Event, e.Detail)
				}
				return w.Flush()
			})
		},
	}
	bindJSON(timeline, &asJSON)
	cmd.AddCommand(create, approve, reject, cancel, complete, timeline)
	return cmd
}

// printAck prints what an accepted call did; a refused call's error is
// returned, so the command exits non-zero with the reason.
func printAck(cmd *cobra.Command) func(plans.Ack, error) error {
	return func(ack plans.Ack, err error) error {
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), ack)
		return err
	}
}

func newDecisionCmd(g *stack.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "decision", Short: "The pending-decision centre: runs that exhausted their retries (needs only the database)"}
	var (
		status string
		asJSON bool
	)
	list := &cobra.Command{
		Use: "list", Short: "List decisions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Refused before the database is opened, as the command line's.
			switch acquisition.DecisionStatus(status) {
			case "", acquisition.DecisionOpen, acquisition.DecisionRetry, acquisition.DecisionAbandon:
			default:
				return usageError{Err: fmt.Errorf("--status must be open, retry, abandon or empty, got %q", status)}
			}
			return withPlans(cmd, g, plans.Config{}, func(svc *plans.Service) error {
				ds, err := svc.ListDecisions(cmd.Context(), acquisition.DecisionStatus(status), 0)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), jsonDecisions(ds))
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				for _, d := range ds {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.PlanID, d.Kind, d.Status, d.Reason)
				}
				return w.Flush()
			})
		},
	}
	list.Flags().StringVar(&status, "status", string(acquisition.DecisionOpen), "open, retry, abandon, or empty for all")
	bindJSON(list, &asJSON)
	var by string
	resolve := &cobra.Command{
		Use:   "resolve DECISION retry|abandon",
		Short: "Retry the failed kind, or abandon (a notification: give it up; a plan: compensate it); prints the effect",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkActor(by); err != nil {
				return err
			}
			if err := checkResolve(args[0], args[1], by); err != nil {
				return flagError(err)
			}
			return withPlans(cmd, g, plans.Config{}, func(svc *plans.Service) error {
				ack, err := svc.ResolveDecision(cmd.Context(), args[0], acquisition.DecisionStatus(args[1]), by)
				return printAck(cmd)(ack, flagError(err))
			})
		},
	}
	bindActor(resolve, &by)
	cmd.AddCommand(list, resolve)
	return cmd
}

// planFields names the flag (or argument) of plan create and decision
// resolve that sets each field the plans API names in a *port.FieldError,
// so that a refusal says what the user typed, not an internal name such as
// idempotency_key.
var planFields = map[string]string{
	"title": "--title", "magnet": "--magnet", "torrent_url": "--torrent-url", "torrent": "--torrent-file",
	"source": "--magnet, --torrent-url, --torrent-file", "info_hash": "--info-hash", "expected_sha256": "--sha256",
	"expected_size": "--size", "target_path": "--target", "idempotency_key": "--idempotency-key", "library_root": "--library-root",
	"decision_id": "DECISION", "action": "ACTION", "resolved_by": "--as",
}

// flagError is err, when it is a *port.FieldError of a field the command
// line sets (planFields), as a usage error naming the flag: only the
// command line makes the request, so the plans API's refusal of a field is
// the command line's, whether checkNewPlan found it before connecting or
// the API after. Any other err is returned as it is.
func flagError(err error) error {
	var fe *port.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name, ok := planFields[fe.Field]
	if !ok {
		return err
	}
	return usageError{Err: fmt.Errorf("%s: %s", name, fe.Reason)}
}

// checkNewPlan applies, before anything connects, the checks of
// plans.Service.CreatePlan that need no database and catch a careless
// command line, refusing with the API's field names (flagError names the
// flags). CreatePlan applies them again with the rest (a magnet whose
// hash differs from --info-hash, a torrent file that does not parse, a
// name too long for the filesystem), whose refusals flagError names too.
// It must refuse nothing the API accepts (TestPlanCreateFlagsRefusedBeforeConnecting).
func checkNewPlan(root string, np plans.NewPlan) error {
	invalid := func(field, format string, args ...any) error {
		return &port.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	title := strings.TrimSpace(np.Title)
	if title == "" {
		return invalid("title", "must not be empty")
	}
	// One-line text, as the API takes it: a control character would be an
	// escape code where the CLI prints the field.
	for _, f := range []struct {
		field, value string
		most         int // characters; 0: no bound of its own
	}{
		{"idempotency_key", np.IdempotencyKey, plans.MaxIdempotencyKey}, {"title", title, plans.MaxTitle},
		{"magnet", np.Magnet, 0}, {"torrent_url", np.TorrentURL, 0}, {"target_path", np.TargetPath, 0},
	} {
		if err := enginekit.ValidateLine(f.field, f.value, ""); err != nil {
			return err
		}
		if n := utf8.RuneCountInString(f.value); f.most > 0 && n > f.most {
			return invalid(f.field, "must be at most %d characters, got %d", f.most, n)
		}
	}
	sources := 0
	for _, set := range []bool{np.Magnet != "", np.TorrentURL != "", len(np.Torrent) > 0} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return invalid("source", "exactly one is required, got %d", sources)
	}
	if u, err := url.Parse(np.Magnet); np.Magnet != "" && (err != nil || u.Scheme != "magnet") {
		return invalid("magnet", "must be a magnet: link")
	}
	if u, err := url.Parse(np.TorrentURL); np.TorrentURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return invalid("torrent_url", "must be an http(s) URL, got %q", np.TorrentURL)
	}
	for _, h := range []struct {
		field, value string
		digits       int
	}{{"info_hash", np.InfoHash, 40}, {"expected_sha256", np.ExpectedSHA256, 64}} {
		// An info hash may be left out where the source names it.
		if h.field == "info_hash" && strings.TrimSpace(h.value) == "" && np.TorrentURL == "" {
			continue
		}
		v := strings.TrimSpace(h.value)
		if _, err := hex.DecodeString(v); err != nil || len(v) != h.digits {
			return invalid(h.field, "must be %d hex digits, got %q", h.digits, h.value)
		}
	}
	if np.ExpectedSize < 0 {
		return invalid("expected_size", "must not be negative, got %d", np.ExpectedSize)
	}
	if !filepath.IsAbs(np.TargetPath) {
		return invalid("target_path", "must be an absolute path, got %q", np.TargetPath)
	}
	// A relative --library-root is refused next, by withPlans, by its name.
	if filepath.IsAbs(root) {
		rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(np.TargetPath))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return invalid("target_path", "%q is not inside the library root %q", np.TargetPath, root)
		}
	}
	return nil
}

// checkResolve applies, before anything connects, the checks of
// plans.Service.ResolveDecision that need no database, with its field
// names (flagError names the argument or the flag).
func checkResolve(id, action, by string) error {
	invalid := func(field, format string, args ...any) error {
		return &port.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if _, err := uuid.Parse(id); err != nil {
		return invalid("decision_id", "not a UUID: %q", id)
	}
	if a := acquisition.DecisionStatus(action); a != acquisition.DecisionRetry && a != acquisition.DecisionAbandon {
		return invalid("action", "must be retry or abandon, got %q", action)
	}
	if err := enginekit.ValidateLine("resolved_by", by, ""); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(by); n > plans.MaxActor {
		return invalid("resolved_by", "must be at most %d characters, got %d", plans.MaxActor, n)
	}
	return nil
}

// bindActor adds --as, who the command records as acting: by default the
// OS user running it. --by is its older name. The command refuses an --as
// that names no one with checkActor.
func bindActor(cmd *cobra.Command, into *string) {
	name := osUser()
	cmd.Flags().StringVar(into, "as", name, "who acts, recorded on the plan or decision (default: the OS user)")
	cmd.Flags().StringVar(into, "by", name, "older name of --as")
	_ = cmd.Flags().MarkDeprecated("by", "use --as")
}
