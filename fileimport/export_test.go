package fileimport

import "context"

// ImportRacing is Import with a hook that runs between the last check of the
// target and the no-replace rename.
func ImportRacing(ctx context.Context, req Request, beforePlace func()) (Result, error) {
	return importFile(ctx, req, beforePlace)
}

// LinkNoReplace exposes the fallback used where RENAME_NOREPLACE is refused.
func LinkNoReplace(tmp, target string) error { return linkNoReplace(tmp, target) }
