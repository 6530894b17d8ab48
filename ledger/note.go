package ledger

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/taskport/taskport/port"
)

// Note records detail on o while o's attempt is still the recorded one and
// has no result, fenced like Commit: otherwise it returns an error wrapping
// port.ErrFenced and writes nothing. A step notes what it is about to do
// before it acts (the import: whether it creates the target file or adopts
// one already there), so that a later attempt or a compensation knows what
// the effect was even when no result was committed. A later Note replaces
// the detail. A detail that Commit would refuse as a result is a
// *port.FieldError, refused before the write.
func Note(ctx context.Context, q DBTX, o Operation, detail any) error {
	raw, err := encode("detail", detail)
	if err != nil {
		return fmt.Errorf("note %s of plan %s: %w", o.Op, o.PlanID, err)
	}
	tag, err := q.Exec(ctx, noteOperationSQL, o.ID, o.Token, raw)
	if err != nil {
		return fmt.Errorf("note %s of plan %s: %w", o.Op, o.PlanID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("note %s of plan %s with %s: %w", o.Op, o.PlanID, o.Token, port.ErrFenced)
	}
	return nil
}

// ReadNote decodes the detail noted on (plan, op) into out; found is false
// when the operation has no row or no detail.
func ReadNote(ctx context.Context, q DBTX, planID uuid.UUID, op Op, out any) (found bool, err error) {
	rows, err := q.Query(ctx, selectNoteSQL, planID, op)
	if err != nil {
		return false, fmt.Errorf("read note of %s of plan %s: %w", op, planID, err)
	}
	notes, err := pgx.CollectRows(rows, pgx.RowTo[[]byte]) // no row: no operation yet
	switch {
	case err != nil:
		return false, fmt.Errorf("read note of %s of plan %s: %w", op, planID, err)
	case len(notes) == 0 || notes[0] == nil:
		return false, nil
	}
	if err := json.Unmarshal(notes[0], out); err != nil {
		return false, fmt.Errorf("decode note of %s of plan %s: %w", op, planID, err)
	}
	return true, nil
}
