-- Switching engines with work in flight (issue 27).
--
-- taskport.engine_switch records every switch of the active engine (the
-- one new runs go to) with who made it and why; the newest row is the
-- active engine, and no row means the primary, temporal. Every process
-- running both engines behind the router re-reads it within its refresh
-- bound, so a switch needs no restart. It is a log, not a setting: the
-- history of switches is what an operator reads back.
--
-- A run moved off an engine that is gone (taskport engine evacuate) keeps
-- its row, ended canceled, with evacuated_at set and evacuated_to naming
-- the run that replaced it on the active engine. evacuated_to is NULL
-- while the replacement is being enqueued, so that an interrupted
-- evacuation finishes the move on its next pass instead of moving it twice.
--
-- Both columns are NULL by default: added without a table rewrite.

-- +goose Up
CREATE TABLE taskport.engine_switch (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    engine      text        NOT NULL CHECK (engine IN ('lease', 'temporal')),
    switched_by text        NOT NULL CHECK (switched_by <> ''),
    reason      text        NOT NULL DEFAULT '',
    switched_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE taskport.run
    ADD COLUMN evacuated_at timestamptz,
    ADD COLUMN evacuated_to uuid;

-- +goose Down
ALTER TABLE taskport.run
    DROP COLUMN evacuated_to,
    DROP COLUMN evacuated_at;
DROP TABLE taskport.engine_switch;
