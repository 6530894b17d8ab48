// Package admin serves the operator surface: recent plans with their
// business timeline, the pending-decision centre, dead letters (failed runs),
// outbox rows given up as failed (with a retry action), and runs still open
// on an old version of their kind. The plan views read business tables only
// (ADR 2.7); the run lists come from the engine's port.Admin, which both
// engines serve from Postgres. Every action shows what it did (the plans
// API's Ack) or why it did nothing.
package admin

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
)

//go:embed templates/*.html
var templateFS embed.FS

// Server is the admin HTTP handler.
type Server struct {
	pool   *pgxpool.Pool
	plans  *plans.Service
	runs   port.Admin
	reg    *port.Registry
	log    *slog.Logger
	pages  *template.Template
	router *http.ServeMux
	// retention is the retention setting the footer shows (SetRetention).
	retention string
}

// New builds the handler. metrics, when non-nil, is mounted at /metrics.
func New(pool *pgxpool.Pool, svc *plans.Service, runs port.Admin, reg *port.Registry, log *slog.Logger, metrics http.Handler) (*Server, error) {
	if pool == nil || svc == nil || runs == nil || reg == nil {
		return nil, errors.New("admin: pool, plans service, run lister and registry are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{pool: pool, plans: svc, runs: runs, reg: reg, log: log, router: http.NewServeMux()}
	pages, err := template.New("").Funcs(template.FuncMap{
		"retention": func() string { return s.retention },
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
	}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("admin templates: %w", err)
	}
	s.pages = pages
	s.router.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	s.router.HandleFunc("GET /readyz", s.ready)
	s.router.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/admin", http.StatusFound) })
	s.router.HandleFunc("GET /admin", s.overviewPage)
	s.router.HandleFunc("GET /admin/api/overview", s.overviewJSON)
	s.router.HandleFunc("GET /admin/plans/{id}", s.planPage)
	s.router.HandleFunc("POST /admin/plans/{id}/approve", s.sameOrigin(s.approve))
	s.router.HandleFunc("POST /admin/plans/{id}/cancel", s.sameOrigin(s.cancel))
	s.router.HandleFunc("POST /admin/decisions/{id}/{action}", s.sameOrigin(s.resolve))
	s.router.HandleFunc("POST /admin/outbox/{id}/retry", s.sameOrigin(s.retryOutbox))
	if metrics != nil {
		s.router.Handle("GET /metrics", metrics)
	}
	return s, nil
}

// SetRetention records the retention setting (retention.Policy.String) for
// the pages' footer, so operators see how long finished runs are kept. Call
// it before serving.
func (s *Server) SetRetention(setting string) { s.retention = setting }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// Overview is what /admin shows, also served as JSON.
type Overview struct {
	Plans     []PlanRow              `json:"plans"`
	Decisions []acquisition.Decision `json:"open_decisions"`
	Dead      []port.RunView         `json:"dead_letters"`
	// FailedOutbox are the outbox rows given up as failed: a hand-off, a
	// wake-up or a cancel that did not happen until an operator retries it.
	FailedOutbox []outbox.FailedRow `json:"failed_outbox"`
	OldRuns      []port.RunView     `json:"runs_on_old_versions"`
	// Done is the result of the action that redirected here, if any.
	Done string `json:"-"`
}

// PlanRow is a plan as the overview lists it: not its source, which for an
// uploaded .torrent is the whole file.
type PlanRow struct {
	ID         string             `json:"id"`
	Title      string             `json:"title"`
	Status     acquisition.Status `json:"status"`
	TargetPath string             `json:"target_path"`
	UpdatedAt  time.Time          `json:"updated_at"`
}

// Overview gathers the lists.
func (s *Server) Overview(ctx context.Context) (Overview, error) {
	var o Overview
	recent, err := acquisition.ListPlans(ctx, s.pool, 50)
	if err != nil {
		return o, fmt.Errorf("recent plans: %w", err)
	}
	for _, p := range recent {
		o.Plans = append(o.Plans, PlanRow{ID: p.ID.String(), Title: p.Title, Status: p.Status, TargetPath: p.TargetPath, UpdatedAt: p.UpdatedAt})
	}
	if o.Decisions, err = s.plans.ListDecisions(ctx, acquisition.DecisionOpen, 100); err != nil {
		return o, fmt.Errorf("open decisions: %w", err)
	}
	if o.Dead, err = s.runs.ListRuns(ctx, port.RunFilter{Statuses: []port.Status{port.StatusFailed}, Limit: 100}); err != nil {
		return o, fmt.Errorf("dead letters: %w", err)
	}
	if o.FailedOutbox, err = outbox.Failed(ctx, s.pool, 100); err != nil {
		return o, err
	}
	open := []port.Status{port.StatusPending, port.StatusRunning, port.StatusWaiting}
	seen := map[port.Kind]bool{}
	for _, d := range s.reg.Definitions() {
		if seen[d.Kind] {
			continue
		}
		seen[d.Kind] = true
		cur, err := s.reg.Current(d.Kind)
		if err != nil || cur.Version < 2 {
			continue
		}
		old, err := s.runs.ListRuns(ctx, port.RunFilter{Kind: d.Kind, BelowVersion: cur.Version, Statuses: open})
		if err != nil {
			return o, fmt.Errorf("runs on old versions of %s: %w", d.Kind, err)
		}
		o.OldRuns = append(o.OldRuns, old...)
	}
	return o, nil
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	o, err := s.Overview(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	o.Done = r.URL.Query().Get("done")
	s.render(w, "overview.html", o)
}

func (s *Server) overviewJSON(w http.ResponseWriter, r *http.Request) {
	o, err := s.Overview(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(o)
}

// planView is the plan page: the timeline and the result of the action that
// redirected here, if any.
type planView struct {
	plans.Timeline
	Done string
}

func (s *Server) planPage(w http.ResponseWriter, r *http.Request) {
	tl, err := s.plans.Timeline(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	s.render(w, "plan.html", planView{Timeline: tl, Done: r.URL.Query().Get("done")})
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	ack, err := s.plans.Approve(r.Context(), r.PathValue("id"), "admin", r.FormValue("note"))
	s.act(w, r, "/admin/plans/"+r.PathValue("id"), ack.Message, err)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	reason := r.FormValue("reason")
	if reason == "" {
		reason = "canceled from /admin"
	}
	ack, err := s.plans.Cancel(r.Context(), r.PathValue("id"), reason)
	s.act(w, r, "/admin/plans/"+r.PathValue("id"), ack.Message, err)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	ack, err := s.plans.ResolveDecision(r.Context(), r.PathValue("id"), acquisition.DecisionStatus(r.PathValue("action")), "admin")
	s.act(w, r, "/admin", ack.Message, err)
}

// retryOutbox hands a failed outbox row back to the dispatchers; the row
// records that "admin" retried it.
func (s *Server) retryOutbox(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, &port.FieldError{Field: "id", Reason: fmt.Sprintf("not a UUID: %q", r.PathValue("id"))})
		return
	}
	err = outbox.Retry(r.Context(), s.pool, id, "admin")
	s.act(w, r, "/admin", "outbox row "+id.String()+" handed back to the dispatchers", err)
}

// act redirects to next with the action's result shown there, or reports
// why the action did nothing.
func (s *Server) act(w http.ResponseWriter, r *http.Request, next, done string, err error) {
	if err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, next+"?"+url.Values{"done": {done}}.Encode(), http.StatusSeeOther)
}

// sameOrigin refuses cross-site form posts (browsers send Sec-Fetch-Site),
// so a page elsewhere cannot approve or cancel through an operator's browser.
func (s *Server) sameOrigin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		next(w, r)
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) render(w http.ResponseWriter, page string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages.ExecuteTemplate(w, page, data); err != nil {
		s.log.Error("render admin page", slog.String("page", page), slog.Any("err", err))
	}
}

// fail maps the port's sentinels onto HTTP statuses.
func (s *Server) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, port.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, port.ErrInvalidInput):
		status = http.StatusBadRequest
	case errors.Is(err, plans.ErrConflict):
		status = http.StatusConflict
	}
	if status == http.StatusInternalServerError {
		s.log.Error("admin request failed", slog.Any("err", err))
	}
	http.Error(w, err.Error(), status)
}
