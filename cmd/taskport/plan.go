package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/codes"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/cmd/internal/stack"
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
	if err := cfg.Validate(); err != nil {
		return flagError(err)
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
				b, err := readTorrentFile(torrentFile)
				if err != nil {
					return err
				}
				np.Torrent = b
			}
			if err := plans.CheckNewPlan(root, np); err != nil {
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
	f.Int64Var(&np.ExpectedSize, "size", 0, "expected size in bytes; required, so that a size left out is not taken for an empty file")
	_ = create.MarkFlagRequired("size")
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
			if err := plans.CheckDecision(args[0], by, note); err != nil {
				return flagError(err)
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				ack, err := svc.Approve(cmd.Context(), args[0], by, note)
				return printAck(cmd)(ack, flagError(err))
			})
		},
	}
	reject := &cobra.Command{
		Use: "reject PLAN", Short: "Reject a plan", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkActor(by); err != nil {
				return err
			}
			if err := plans.CheckDecision(args[0], by, note); err != nil {
				return flagError(err)
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				ack, err := svc.Reject(cmd.Context(), args[0], by, note)
				return printAck(cmd)(ack, flagError(err))
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
			if err := plans.CheckCancel(args[0], by, reason); err != nil {
				return flagError(err)
			}
			return withPlans(cmd, g, plans.Config{LibraryRoot: root}, func(svc *plans.Service) error {
				ack, err := svc.Cancel(cmd.Context(), args[0], by, reason)
				return printAck(cmd)(ack, flagError(err))
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
				ack, err := svc.ReportDownloadComplete(cmd.Context(), args[0], contentPath)
				return printAck(cmd)(ack, flagError(err))
			})
		},
	}
	complete.Flags().StringVar(&contentPath, "content-path", "", "where the payload is: inside --download-dir")
	complete.Flags().StringVar(&downloads, "download-dir", stack.EnvOr("DOWNLOAD_DIR", "/downloads"), "absolute directory qBittorrent saves into (env DOWNLOAD_DIR)")
	timeline := &cobra.Command{
		Use: "timeline PLAN", Short: "Print a plan's business timeline", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The id is the command line's, refused before the database is
			// opened as approve's is (plans.Timeline parses it the same way).
			if _, err := uuid.Parse(args[0]); err != nil {
				return usageError{Err: fmt.Errorf("PLAN: not a UUID: %q", args[0])}
			}
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

// maxTorrentFile bounds what plan create reads of --torrent-file: the
// largest .torrent qBittorrent takes by default (its torrent file size
// limit, 100 MiB).
const maxTorrentFile = 100 << 20

// readTorrentFile reads --torrent-file, at most maxTorrentFile bytes: a file
// larger than that (a payload named by mistake, /dev/zero) is refused as the
// command line's, without being read whole into memory. A pipe
// (<(curl ...)) is read as a file is.
func readTorrentFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--torrent-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTorrentFile+1))
	if err != nil {
		return nil, fmt.Errorf("--torrent-file: %w", err)
	}
	if len(b) > maxTorrentFile {
		return nil, usageError{Err: fmt.Errorf("--torrent-file: larger than %d MiB: not a .torrent file", maxTorrentFile>>20)}
	}
	return b, nil
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
			if err := plans.CheckResolution(args[0], acquisition.DecisionStatus(args[1]), by); err != nil {
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

// planFields names the flag (or argument) of the plan and decision commands
// that sets each field the plans API names in a *port.FieldError,
// so that a refusal says what the user typed, not an internal name such as
// idempotency_key.
var planFields = map[string]string{
	"title": "--title", "magnet": "--magnet", "torrent_url": "--torrent-url", "torrent": "--torrent-file",
	"source": "--magnet, --torrent-url, --torrent-file", "info_hash": "--info-hash", "expected_sha256": "--sha256",
	"expected_size": "--size", "target_path": "--target", "idempotency_key": "--idempotency-key", "library_root": "--library-root", "download_dir": "--download-dir",
	"decision_id": "DECISION", "action": "ACTION", "resolved_by": "--as",
	"plan_id": "PLAN", "decided_by": "--as", "canceled_by": "--as", "note": "--note", "reason": "--reason",
	"plan": "PLAN-OR-INFO-HASH", "content_path": "--content-path",
}

// flagError is err, when it is a *port.FieldError of a field the command
// line sets (planFields), as a usage error naming the flag: only the
// command line makes the request, so the plans API's refusal of a field is
// the command line's, whether plans.CheckNewPlan found it before connecting or
// the API after. Any other err is returned as it is.
func flagError(err error) error { return fieldFlagError(err, planFields) }

// fieldFlagError is err, when it is a *port.FieldError of a field that
// flags names the flag of, as a usage error (exit 2) naming that flag;
// any other err as it is.
func fieldFlagError(err error, flags map[string]string) error {
	var fe *port.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	name, ok := flags[fe.Field]
	if !ok {
		return err
	}
	return usageError{Err: fmt.Errorf("%s: %s", name, fe.Reason)}
}

// bindActor adds --as, who the command records as acting: by default the
// OS user running it. --by is its older name. The command refuses an --as
// that names no one with checkActor.
func bindActor(cmd *cobra.Command, into *string) {
	name := osUser()
	cmd.Flags().StringVar(into, "as", name, "who acts, recorded on the plan or decision")
	cmd.Flags().StringVar(into, "by", name, "older name of --as")
	_ = cmd.Flags().MarkDeprecated("by", "use --as")
}
