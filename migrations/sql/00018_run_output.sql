-- A run's result (issue 25): what a kind built with port.HandleResult
-- returned, recorded by the engine's terminal write of a run that
-- succeeded, in the same statement as its status; NULL while the run is
-- open, when it failed or was canceled, and for a kind without a result.
-- port.RunView.Output carries it and port.Result decodes it.
--
-- A NULL column: a catalog change, no table rewrite. Workers of the
-- previous release never write it, so their runs read as runs without a
-- result.

-- +goose Up
ALTER TABLE taskport.run ADD COLUMN output jsonb;

-- +goose Down
ALTER TABLE taskport.run DROP COLUMN output;
