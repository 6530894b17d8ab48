package runscmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskport/taskport/port"
)

// RunJSON is a run as --json prints it (runs get, cancel; one entry of
// runs list).
type RunJSON struct {
	ID          port.RunID  `json:"id"`
	Kind        port.Kind   `json:"kind"`
	Version     int         `json:"version"`
	BusinessKey string      `json:"business_key,omitempty"`
	Status      port.Status `json:"status"`
	Attempts    int         `json:"attempts"`
	CurrentStep string      `json:"current_step,omitempty"`
	LastError   string      `json:"last_error,omitempty"`
	CreatedAt   time.Time   `json:"created_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	FinishedAt  *time.Time  `json:"finished_at,omitempty"`
	// MovedTo is the run an evacuation moved this one to
	// (port.RunView.MovedTo): the canceled run's work goes on there.
	MovedTo port.RunID `json:"moved_to,omitempty"`
	Cursor  string     `json:"cursor"`
}

// PageJSON is a page as `runs list --json` prints it; Next, the cursor of
// the next page (--after), is empty on the last page.
type PageJSON struct {
	Runs []RunJSON `json:"runs"`
	Next string    `json:"next,omitempty"`
}

// RetryJSON is what `runs retry --json` prints: the failed run, the run
// that retries it, and who asked.
type RetryJSON struct {
	RunID    port.RunID `json:"run_id"`
	NewRunID port.RunID `json:"new_run_id"`
	By       string     `json:"by"`
}

func jsonRun(v port.RunView) RunJSON {
	r := RunJSON{ID: v.ID, Kind: v.Kind, Version: v.Version, BusinessKey: v.BusinessKey, Status: v.Status, Attempts: v.Attempts,
		CurrentStep: v.CurrentStep, LastError: v.LastError, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, MovedTo: v.MovedTo,
		Cursor: v.Cursor}
	if !v.FinishedAt.IsZero() {
		r.FinishedAt = &v.FinishedAt
	}
	return r
}

func jsonRuns(vs []port.RunView) []RunJSON {
	out := make([]RunJSON, len(vs))
	for i, v := range vs {
		out[i] = jsonRun(v)
	}
	return out
}

// JSONFlag is the flag every read command takes to print JSON instead of a
// table (BindJSON).
const JSONFlag = "json"

const jsonUsage = "print JSON instead of a table"

// BindJSON adds --json to a read command of the binary, as the runs
// commands have it.
func BindJSON(cmd *cobra.Command, into *bool) {
	cmd.Flags().BoolVar(into, JSONFlag, false, jsonUsage)
}

// WriteJSON writes v as --json prints it: indented, one value.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const timeLayout = "2006-01-02 15:04:05"

func printRuns(out io.Writer, page []port.RunView, next string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tKIND\tVERSION\tSTATUS\tATTEMPTS\tSTEP\tBUSINESS KEY\tCREATED\tLAST ERROR")
	for _, v := range page {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.Kind, v.Version, v.Status, v.Attempts, v.CurrentStep,
			v.BusinessKey, v.CreatedAt.UTC().Format(timeLayout), firstLine(v.LastError))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if next != "" {
		_, err := fmt.Fprintf(out, "next page: --after %s\n", next)
		return err
	}
	return nil
}

func printRun(out io.Writer, v port.RunView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	finished := ""
	if !v.FinishedAt.IsZero() {
		finished = v.FinishedAt.UTC().Format(timeLayout)
	}
	rows := [][2]string{
		{"id", string(v.ID)}, {"kind", string(v.Kind)}, {"version", strconv.Itoa(v.Version)}, {"business key", v.BusinessKey},
		{"status", string(v.Status)}, {"attempts", strconv.Itoa(v.Attempts)}, {"step", v.CurrentStep}, {"last error", v.LastError},
		{"created", v.CreatedAt.UTC().Format(timeLayout)}, {"updated", v.UpdatedAt.UTC().Format(timeLayout)}, {"finished", finished},
	}
	if v.MovedTo != "" {
		// Only a moved run has the row: its canceled status is not the
		// end of its work.
		rows = append(rows, [2]string{"moved to", string(v.MovedTo) + " (an evacuation moved the run there)"})
	}
	for _, kv := range rows {
		fmt.Fprintf(w, "%s:\t%s\n", kv[0], kv[1])
	}
	return w.Flush()
}

// firstLine keeps a table row on one line.
func firstLine(s string) string {
	if line, _, cut := strings.Cut(s, "\n"); cut {
		return line + " …"
	}
	return s
}
