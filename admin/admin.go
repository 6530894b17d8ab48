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
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskport/taskport/acquisition"
	"github.com/taskport/taskport/outbox"
	"github.com/taskport/taskport/plans"
	"github.com/taskport/taskport/port"
	"github.com/taskport/taskport/router"
)

//go:embed templates/*.html
var templateFS embed.FS

// Server is the admin HTTP handler.
type Server struct {
	pool    *pgxpool.Pool
	plans   *plans.Service
	runs    port.Admin
	reg     *port.Registry
	log     *slog.Logger
	auth    Auth
	origins []string
	// hosts are the Host headers the admin answers to: its origins'.
	hosts  map[string]bool
	pages  *template.Template
	router *http.ServeMux
	// retention is the retention setting the footer shows (Config.Retention).
	retention string
}

// Config is what New wires.
type Config struct {
	// Pool, Plans, Runs and Registry are required.
	Pool     *pgxpool.Pool
	Plans    *plans.Service
	Runs     port.Admin
	Registry *port.Registry
	// Logger. Default: discard.
	Logger *slog.Logger
	// Metrics, when non-nil, is mounted at /metrics, like /healthz and
	// /readyz without authentication (Prometheus scrapes it; they show
	// no business data).
	Metrics http.Handler
	// Auth is required: how requests are authenticated.
	Auth Auth
	// Origins are the admin's public origins (scheme://host[:port]): the
	// admin answers only to their hosts (a request naming another Host is
	// refused with 421, against DNS rebinding), and a state change may
	// come from them. Required with Tokens or Proxy; with Local the admin
	// also answers to loopback names (localhost, 127.0.0.0/8, [::1]) on
	// the port it serves.
	Origins []string
	// RunURL, when set, is where the engine's UI shows a run (the Temporal
	// UI): the timeline links each hand-off, operation and decision to it.
	RunURL func(port.RunID) string
	// Retention is the retention setting (retention.Policy.String) the
	// pages' footer shows, so operators see how long finished runs are
	// kept. Empty: not shown.
	Retention string
}

// New builds the handler.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Plans == nil || cfg.Runs == nil || cfg.Registry == nil {
		return nil, errors.New("admin: pool, plans service, run lister and registry are required")
	}
	hosts, err := checkAccess(cfg.Auth, cfg.Origins)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{pool: cfg.Pool, plans: cfg.Plans, runs: cfg.Runs, reg: cfg.Registry, log: cfg.Logger,
		auth: cfg.Auth, origins: cfg.Origins, hosts: hosts, retention: cfg.Retention, router: http.NewServeMux()}
	pages, err := template.New("").Funcs(template.FuncMap{
		"retention": func() string { return s.retention },
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05")
		},
		"runURL": func(id string) string {
			if cfg.RunURL == nil {
				return ""
			}
			return cfg.RunURL(port.RunID(id))
		},
	}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("admin templates: %w", err)
	}
	s.pages = pages
	s.router.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	s.router.HandleFunc("GET /readyz", s.ready)
	s.router.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/admin", http.StatusFound) })
	for _, route := range s.routes() {
		s.router.HandleFunc(route.Method+" "+route.Pattern, s.guard(route.Role, route.handle))
	}
	if cfg.Metrics != nil {
		s.router.Handle("GET /metrics", cfg.Metrics)
	}
	return s, nil
}

// CheckAccess is New's check of Auth and Origins alone, for a command that
// wants to refuse them before it connects to anything New needs.
func CheckAccess(auth Auth, origins []string) error {
	_, err := checkAccess(auth, origins)
	return err
}

// checkAccess validates auth and origins, and returns the hosts the
// origins name.
func checkAccess(auth Auth, origins []string) (map[string]bool, error) {
	if err := auth.validate(); err != nil {
		return nil, err
	}
	hosts, err := originHosts(origins)
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 && auth.Local == "" {
		return nil, errors.New("admin: public origins are required with token or proxy auth: the admin answers only to their hosts")
	}
	return hosts, nil
}

// Route is an authenticated endpoint and the role it needs.
type Route struct {
	Method, Pattern string
	Role            Role
}

// Routes lists the authenticated endpoints: the table the access test
// walks, so an endpoint added to routes is tested for every role.
func Routes() []Route {
	var out []Route
	for _, r := range (&Server{}).routes() {
		out = append(out, r.Route)
	}
	return out
}

type route struct {
	Route
	handle http.HandlerFunc
}

func (s *Server) routes() []route {
	return []route{
		{Route{http.MethodGet, "/admin", RoleViewer}, s.overviewPage},
		{Route{http.MethodGet, "/admin/api/overview", RoleViewer}, s.overviewJSON},
		{Route{http.MethodGet, "/admin/plans/{id}", RoleViewer}, s.planPage},
		{Route{http.MethodGet, "/admin/decisions/{id}", RoleViewer}, s.decisionPage},
		{Route{http.MethodPost, "/admin/plans/{id}/approve", RoleOperator}, s.approve},
		{Route{http.MethodPost, "/admin/plans/{id}/reject", RoleOperator}, s.reject},
		{Route{http.MethodPost, "/admin/plans/{id}/cancel", RoleOperator}, s.cancel},
		{Route{http.MethodPost, "/admin/decisions/{id}/{action}", RoleOperator}, s.resolve},
		{Route{http.MethodPost, "/admin/outbox/{id}/retry", RoleOperator}, s.retryOutbox},
		{Route{http.MethodPost, "/admin/runs/{id}/retry", RoleOperator}, s.retryRun},
	}
}

// A request naming a Host the admin does not answer to reaches no handler
// (hostAllowed), except the probes and metrics: the kubelet and Prometheus
// address the pod by IP, and those show no business data and change
// nothing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz", "/metrics":
	default:
		if !s.hostAllowed(r) {
			http.Error(w, fmt.Sprintf("misdirected request: this admin does not answer to host %q (see --public-origin)", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
	}
	s.router.ServeHTTP(w, r)
}

// Overview is what /admin shows, also served as JSON.
type Overview struct {
	Plans []PlanRow `json:"plans"`
	// NextPlans is the cursor of the next page of plans (?after=);
	// empty on the last page.
	NextPlans string                 `json:"next_plans,omitempty"`
	Decisions []acquisition.Decision `json:"open_decisions"`
	Dead      []port.RunView         `json:"dead_letters"`
	// FailedOutbox are the outbox rows given up as failed: a hand-off, a
	// wake-up or a cancel that did not happen until an operator retries it.
	FailedOutbox []outbox.FailedRow `json:"failed_outbox"`
	OldRuns      []port.RunView     `json:"runs_on_old_versions"`
	// Engines is what `taskport engine status` shows: the active engine,
	// who switched to it, and the open runs of each engine per kind.
	Engines router.Status `json:"engines"`
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

// Overview gathers the lists: the page of plans q asks for, and the rest.
func (s *Server) Overview(ctx context.Context, q plans.PlanQuery) (Overview, error) {
	// Lists built here start empty, not nil: the API's JSON gives [] for
	// none, as the lists the stores return do, never null.
	o := Overview{Plans: []PlanRow{}, OldRuns: []port.RunView{}}
	page, err := s.plans.ListPlans(ctx, q)
	if err != nil {
		return o, err
	}
	for _, p := range page.Plans {
		o.Plans = append(o.Plans, PlanRow{ID: p.ID.String(), Title: p.Title, Status: p.Status, TargetPath: p.TargetPath, UpdatedAt: p.UpdatedAt})
	}
	o.NextPlans = page.Next
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
	if o.Engines, err = router.ReadStatus(ctx, s.pool); err != nil {
		return o, fmt.Errorf("engines: %w", err)
	}
	return o, nil
}

// overviewView is the overview page: the lists, the plans filter and the
// viewer's session.
type overviewView struct {
	session
	Overview
	Query    plans.PlanQuery
	Statuses []acquisition.Status
	// NextPage links the next page of plans. A template.URL, since
	// html/template would escape the & and = of a query string it is given
	// as text; it is built by url.Values.Encode, so it is safe.
	NextPage template.URL
}

// planQuery reads the plans filter: ?status=&q=&after=.
func planQuery(r *http.Request) plans.PlanQuery {
	v := r.URL.Query()
	return plans.PlanQuery{Status: acquisition.Status(v.Get("status")), Search: v.Get("q"), After: v.Get("after")}
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request) {
	q := planQuery(r)
	o, err := s.Overview(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	o.Done = takeDone(w, r)
	view := overviewView{session: s.session(w, r), Overview: o, Query: q, Statuses: acquisition.Statuses()}
	if o.NextPlans != "" {
		view.NextPage = template.URL("/admin?" + url.Values{"status": {string(q.Status)}, "q": {q.Search}, "after": {o.NextPlans}}.Encode()) //nolint:gosec // encoded above
	}
	s.render(w, "overview.html", view)
}

func (s *Server) overviewJSON(w http.ResponseWriter, r *http.Request) {
	o, err := s.Overview(r.Context(), planQuery(r))
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(o)
}

// planView is the plan page: the timeline, the plan's runs (a step enqueues
// the next kind in its own commit, which leaves no hand-off row in the
// timeline: the runs show it) and the result of the action that redirected
// here, if any.
type planView struct {
	session
	plans.Timeline
	Runs []port.RunView
	Done string
}

// planRuns bounds the runs the plan page lists; a plan has a handful.
const planRuns = 100

func (s *Server) planPage(w http.ResponseWriter, r *http.Request) {
	tl, err := s.plans.Timeline(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	runs, err := s.runs.ListRuns(r.Context(), port.RunFilter{BusinessKey: tl.Plan.ID.String(), Limit: planRuns})
	if err != nil {
		s.fail(w, err)
		return
	}
	slices.Reverse(runs) // oldest first, as the timeline
	s.render(w, "plan.html", planView{session: s.session(w, r), Timeline: tl, Runs: runs, Done: takeDone(w, r)})
}

// decisionView is the decision page: the decision with the step's error
// (its reason), and its failed run as the engine last saw it (attempts,
// step), when the engine still lists it.
type decisionView struct {
	session
	acquisition.Decision
	Run    port.RunView
	HasRun bool
}

func (s *Server) decisionPage(w http.ResponseWriter, r *http.Request) {
	d, err := s.plans.Decision(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	view := decisionView{session: s.session(w, r), Decision: d}
	runs, err := s.runs.ListRuns(r.Context(), port.RunFilter{Kind: d.Kind, BusinessKey: d.PlanID.String()})
	if err != nil {
		s.fail(w, err)
		return
	}
	for _, run := range runs {
		if run.ID == d.RunID {
			view.Run, view.HasRun = run, true
		}
	}
	s.render(w, "decision.html", view)
}

// The actions record the authenticated user as who acted.

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	ack, err := s.plans.Approve(r.Context(), r.PathValue("id"), identityOf(r).User, r.PostFormValue("note"))
	s.act(w, r, "/admin/plans/"+r.PathValue("id"), ack.Message, err)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request) {
	ack, err := s.plans.Reject(r.Context(), r.PathValue("id"), identityOf(r).User, r.PostFormValue("note"))
	s.act(w, r, "/admin/plans/"+r.PathValue("id"), ack.Message, err)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	reason := r.PostFormValue("reason")
	if reason == "" {
		reason = "canceled from /admin"
	}
	ack, err := s.plans.Cancel(r.Context(), r.PathValue("id"), identityOf(r).User, reason)
	s.act(w, r, "/admin/plans/"+r.PathValue("id"), ack.Message, err)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	ack, err := s.plans.ResolveDecision(r.Context(), r.PathValue("id"), acquisition.DecisionStatus(r.PathValue("action")), identityOf(r).User)
	s.act(w, r, "/admin", ack.Message, err)
}

// retryOutbox hands a failed outbox row back to the dispatchers; the row
// records who retried it.
func (s *Server) retryOutbox(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	err = outbox.Retry(r.Context(), s.pool, id, identityOf(r).User)
	s.act(w, r, "/admin", "outbox row "+id.String()+" handed back to the dispatchers", err)
}

// parseID reads the {id} of a route naming a row by uuid: anything else is
// a 400, as the plans API answers a malformed plan or decision id, and never
// reaches SQL (a NUL or invalid UTF-8 there is Postgres's error, a 500).
func parseID(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, &port.FieldError{Field: "id", Reason: fmt.Sprintf("not a UUID: %q", r.PathValue("id"))}
	}
	return id, nil
}

// retryRun retries a dead letter as a new run under a derived key (the
// failed run stays listed). A run the decision centre owns is refused, and
// nothing is enqueued (acquisition.CheckRunRetry). An id that is no uuid is
// a 400; one spelt otherwise than Enqueue returns it (uppercase, braced) is
// passed on as given, and is an unknown run (404), as the port's spec says.
func (s *Server) retryRun(w http.ResponseWriter, r *http.Request) {
	if _, err := parseID(r); err != nil {
		s.fail(w, err)
		return
	}
	id := port.RunID(r.PathValue("id"))
	if err := acquisition.CheckRunRetry(r.Context(), s.pool, id); err != nil {
		s.fail(w, err)
		return
	}
	next, err := s.runs.Retry(r.Context(), id)
	if err == nil {
		s.log.Info("dead letter retried", slog.String("run_id", string(id)), slog.String("new_run_id", string(next)), slog.String("by", identityOf(r).User))
	}
	s.act(w, r, "/admin", fmt.Sprintf("run %s retried as run %s", id, next), err)
}

// act redirects to next with the action's result shown there, or reports
// why the action did nothing.
func (s *Server) act(w http.ResponseWriter, r *http.Request, next, done string, err error) {
	if err != nil {
		s.fail(w, err)
		return
	}
	setDone(w, r, done)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		s.log.Warn("admin not ready", slog.Any("err", err))
		http.Error(w, "postgres unavailable", http.StatusServiceUnavailable)
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

// fail maps the port's sentinels onto HTTP statuses. Those errors are the
// business API's own words about the request; any other error may carry
// internals (SQL, addresses) and is logged, the client told only that it
// happened.
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
		http.Error(w, "internal error: the admin log has the details", status)
		return
	}
	http.Error(w, err.Error(), status)
}
